"""Tag subscription parsing and RocketMQ's two-step (hash code, then exact string) match."""

import pytest

from raftmq.store.errors import StoreError
from raftmq.store.java import java_string_hash
from raftmq.store.tag_filter import InvalidTagExpressionError, TagFilter, tags_code


@pytest.mark.parametrize("expr", [None, "", "   ", "*", " * "])
def test_everything_expressions(expr):
    f = TagFilter.parse(expr)
    assert f.is_all
    assert f.matches_code(12345) and f.matches_code(0)
    assert f.matches_tags(None) and f.matches_tags("anything")


def test_or_list_is_whitespace_tolerant():
    f = TagFilter.parse("  TagA||TagB ||   TagC  ")
    assert f.tags == {"TagA", "TagB", "TagC"}
    assert f.codes == {java_string_hash(t) for t in ("TagA", "TagB", "TagC")}
    assert java_string_hash("TagA") == 2598919
    assert f.matches_code(2598919)
    assert not f.matches_code(java_string_hash("TagD"))
    assert f.matches_tags("TagB")
    assert not f.matches_tags("TagD")
    assert not f.matches_tags(None)


def test_single_tag():
    f = TagFilter.parse("TagA")
    assert not f.is_all and f.tags == {"TagA"}


def test_hash_collision_is_caught_by_the_exact_string_step():
    # "Aa" and "BB" have the same Java hashCode (2112): step one lets both through, step two separates them.
    assert java_string_hash("Aa") == java_string_hash("BB")
    f = TagFilter.parse("Aa")
    assert f.matches_code(tags_code("BB"))
    assert not f.matches_tags("BB")
    assert f.matches_tags("Aa")


def test_tags_code_of_absent_tags_is_zero_and_sign_extended_otherwise():
    assert tags_code(None) == 0
    assert tags_code("") == 0
    assert tags_code("TagZZZZZZZZ") == -818644358


@pytest.mark.parametrize(
    ("expr", "fragment"),
    [
        ("A ||", "empty tag at the end"),
        ("|| B", "empty tag at the start"),
        ("A |||| B", "between two '||'"),
        ("A | B", "stray '|'"),
        ("A && B", "'&'"),
        ("A || *", "'*' must be the whole expression"),
        ("A B", "contains whitespace"),
        ("||", "empty tag"),
    ],
)
def test_malformed_expressions_say_what_is_wrong(expr, fragment):
    with pytest.raises(InvalidTagExpressionError) as ei:
        TagFilter.parse(expr)
    assert fragment in str(ei.value)
    assert repr(expr) in str(ei.value)
    assert isinstance(ei.value, StoreError) and isinstance(ei.value, ValueError)


def test_non_string_is_rejected():
    with pytest.raises(InvalidTagExpressionError):
        TagFilter.parse(42)  # type: ignore[arg-type]
