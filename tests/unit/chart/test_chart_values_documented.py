"""Every key of values.yaml carries a comment directly above it."""

import re

from chart_rendering import CHART_DIR

KEY = re.compile(r"^(?P<indent>\s*)(?P<key>[A-Za-z][\w.-]*):")


def undocumented_keys(text: str) -> list[str]:
    missing = []
    lines = text.splitlines()
    for number, line in enumerate(lines):
        match = KEY.match(line)
        if not match:
            continue
        above = lines[number - 1] if number else ""
        if not above.strip().startswith("#"):
            missing.append(f"line {number + 1}: {match['key']}")
    return missing


def test_every_value_key_has_a_comment():
    missing = undocumented_keys((CHART_DIR / "values.yaml").read_text())
    assert not missing, "values.yaml keys without a comment above them: " + ", ".join(missing)


def test_the_check_catches_an_undocumented_key():
    assert undocumented_keys("# -- documented\na: 1\nb: 2\n") == ["line 3: b"]
