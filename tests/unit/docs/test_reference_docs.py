"""The generated reference pages under docs/reference/ are what the code renders now: each page
is rendered again in memory and compared, so a new field, value, command, reason, finding or
metric that is not in the docs fails here with the command that rewrites them."""

from __future__ import annotations

import pytest
from stepscope_dev import reference_docs
from stepscope_dev.reference_docs import (
    PAGES,
    REFERENCE,
    REGENERATE_COMMAND,
    chart_value_rows,
    enum_members_with_groups,
    finding_rows,
    settings_table,
    stale_pages,
    user_commands,
)
from stepscope_operator.settings.variables import ENV

from stepscope.api.phases import Reason


@pytest.mark.parametrize("name", sorted(PAGES))
def test_the_page_is_what_the_code_renders(name: str) -> None:
    written = (REFERENCE / name).read_text(encoding="utf-8")
    assert written == PAGES[name](), (
        f"docs/reference/{name} is not what the current code renders; run `{REGENERATE_COMMAND}`"
    )


def test_a_changed_page_is_named_as_stale(tmp_path, monkeypatch) -> None:
    rendered = {name: render() for name, render in PAGES.items()}
    for name, text in rendered.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    monkeypatch.setattr(reference_docs, "REFERENCE", tmp_path)
    assert stale_pages() == []
    (tmp_path / "cli.md").write_text("# Command line\n")
    (tmp_path / "metrics.md").unlink()
    assert stale_pages() == ["cli.md", "metrics.md"]


def test_a_values_comment_belongs_to_the_key_below_it() -> None:
    text = (
        "# A file comment, not a key's.\n"
        "# -- The operator.\n"
        "operator:\n"
        "  # -- Its image,\n"
        "  # over two lines.\n"
        "  image: x\n"
        "  undocumented: 1\n"
        "# -- Top again.\n"
        "top: {}\n"
    )
    assert list(chart_value_rows(text)) == [
        ("operator", "The operator."),
        ("operator.image", "Its image, over two lines."),
        ("top", "Top again."),
    ]


def test_every_reason_is_listed_under_its_group() -> None:
    source = (reference_docs.REPO_ROOT / "stepscope" / "api" / "phases.py").read_text()
    members = enum_members_with_groups(source, "Reason")
    assert [value for _, value in members] == [r.value for r in Reason]
    assert ("Schedules.", "Scheduled") in members
    page = PAGES["phases-and-reasons.md"]()
    assert all(f"`{r.value}`" in page for r in Reason)


def test_the_findings_page_holds_the_ids_a_verdict_shows() -> None:
    ids = [finding for finding, _, _ in finding_rows()]
    # The README's straggler verdict and both branches of a conditional id.
    assert "straggler-rank" in ids
    assert {"launch-bound", "host-overhead"} <= set(ids)
    assert len(ids) == len(set(ids))


def test_the_cli_page_shows_every_user_command_and_no_contributor_command() -> None:
    page = PAGES["cli.md"]()
    commands = user_commands()
    assert {"analyze", "diff", "artifacts"} <= set(commands)
    assert all(f"$ stepscope {c} --help" in page for c in commands)
    assert "stepscope dev" not in page


def test_the_settings_table_has_a_row_per_variable() -> None:
    rows = [line for line in settings_table().splitlines() if line.startswith("| `")]
    assert [row.split("`")[1] for row in rows] == list(ENV.values())
