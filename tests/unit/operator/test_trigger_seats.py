"""How many triggers of one namespace are watched: the oldest, whatever order they are seen in,
and a seat freed by a deletion goes to the next oldest."""

from __future__ import annotations

from stepscope_operator.triggers.seats import TriggerSeats


def stamp(i: int) -> str:
    return f"2026-12-06T10:{i:02d}:00Z"


def test_the_oldest_triggers_are_watched_in_any_order_of_arrival() -> None:
    seats = TriggerSeats(limit=3)
    arrivals = [5, 1, 4, 0, 2, 3]
    for i in arrivals:
        seats.seated("a", f"u{i}", stamp(i))
    assert [i for i in range(6) if seats.seated("a", f"u{i}", stamp(i))] == [0, 1, 2]
    # Another namespace has seats of its own.
    assert seats.seated("b", "u9", stamp(9))


def test_a_deleted_trigger_frees_its_seat_for_the_next_oldest() -> None:
    seats = TriggerSeats(limit=2)
    for i in range(4):
        seats.seated("a", f"u{i}", stamp(i))
    assert not seats.seated("a", "u2", stamp(2))
    seats.leave("a", "u0")
    assert seats.seated("a", "u2", stamp(2))
    assert not seats.seated("a", "u3", stamp(3))


def test_a_namespace_with_no_triggers_is_forgotten() -> None:
    seats = TriggerSeats(limit=2)
    seats.seated("a", "u0", stamp(0))
    seats.leave("a", "u0")
    assert seats._known == {} and seats._seated == {}


def test_a_trigger_created_in_the_same_second_never_takes_a_seated_ones_seat() -> None:
    # Creation times have whole seconds; UIDs are random, so "zz" would sort after "aa" by
    # UID and take its seat if ties went by UID.
    seats = TriggerSeats(limit=1)
    assert seats.seated("a", "zz", stamp(0))
    assert not seats.seated("a", "aa", stamp(0))
    assert seats.seated("a", "zz", stamp(0))
