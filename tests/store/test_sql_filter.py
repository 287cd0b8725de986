"""SQL92 property filters: a table of expressions x property sets, including the examples in RocketMQ's docs."""

import pytest

from raftmq.store.sql_filter import InvalidFilterExpressionError, SqlFilter

# (expression, properties, selected?)
TABLE = [
    # RocketMQ docs (4.x "Filter by SQL92" example and 5.x message filtering page)
    ("a between 0 and 3", {"a": "0"}, True),
    ("a between 0 and 3", {"a": "3"}, True),
    ("a between 0 and 3", {"a": "4"}, False),
    ("a between 0 and 3", {}, False),
    ("(TAGS is not null and TAGS in ('TagA', 'TagB')) and (a is not null and a between 0 and 3)",
     {"TAGS": "TagA", "a": "2"}, True),
    ("(TAGS is not null and TAGS in ('TagA', 'TagB')) and (a is not null and a between 0 and 3)",
     {"TAGS": "TagC", "a": "2"}, False),
    ("(TAGS is not null and TAGS in ('TagA', 'TagB')) and (a is not null and a between 0 and 3)",
     {"TAGS": "TagB"}, False),
    ("a > 5 AND b = 'abc'", {"a": "6", "b": "abc"}, True),
    ("a > 5 AND b = 'abc'", {"a": "5", "b": "abc"}, False),
    ("a > 5 AND b = 'abc'", {"a": "6", "b": "abd"}, False),
    ("region IN ('hangzhou', 'shanghai')", {"region": "hangzhou"}, True),
    ("region IN ('hangzhou', 'shanghai')", {"region": "beijing"}, False),
    ("price > 10.5", {"price": "10.6"}, True),
    ("price > 10.5", {"price": "10"}, False),
    ("price >= 10", {"price": "10"}, True),
    ("price < 10", {"price": "9.99"}, True),
    ("price <= -1", {"price": "-1"}, True),
    ("price = 100", {"price": "100.0"}, True),
    ("price <> 100", {"price": "101"}, True),
    ("price != 100", {"price": "100"}, False),
    # comparisons
    ("a = 'x'", {"a": "x"}, True),
    ("a = 'x'", {"a": "X"}, False),
    ("a <> 'x'", {"a": "y"}, True),
    ("a <> 'x'", {}, False),                       # NULL <> 'x' is unknown, not true
    ("a = 'it''s'", {"a": "it's"}, True),
    ("a > 5", {"a": "five"}, False),               # not a number: unknown
    ("NOT a > 5", {"a": "five"}, False),           # NOT unknown is unknown
    ("NOT a > 5", {"a": "4"}, True),
    ("a NOT BETWEEN 1 AND 2", {"a": "3"}, True),
    ("a NOT BETWEEN 1 AND 2", {"a": "1"}, False),
    ("a NOT IN ('x', 'y')", {"a": "z"}, True),
    ("a NOT IN ('x', 'y')", {}, False),
    ("a IS NULL", {}, True),
    ("a IS NULL", {"a": ""}, False),
    ("a IS NOT NULL", {"a": ""}, True),
    ("flag = TRUE", {"flag": "true"}, True),
    ("flag = FALSE", {"flag": "true"}, False),
    ("TRUE", {}, True),
    ("FALSE OR a = '1'", {"a": "1"}, True),
    ("a CONTAINS 'ell'", {"a": "hello"}, True),
    ("a NOT CONTAINS 'ell'", {"a": "hello"}, False),
    ("a STARTSWITH 'he'", {"a": "hello"}, True),
    ("a ENDSWITH 'lo'", {"a": "hello"}, True),
    # three-valued logic
    ("a = '1' OR b = '2'", {"b": "2"}, True),
    ("a = '1' OR b = '2'", {}, False),
    ("a = '1' AND b = '2'", {"a": "1"}, False),
    ("NOT (a = '1' AND b = '2')", {"a": "2"}, True),   # FALSE AND unknown = FALSE
    ("NOT (a = '1' AND b = '2')", {"a": "1"}, False),  # TRUE AND unknown = unknown
    # precedence: AND binds tighter than OR; keywords case-insensitive; dotted names
    ("a = '1' or b = '2' and c = '3'", {"a": "1"}, True),
    ("(a = '1' or b = '2') and c = '3'", {"a": "1"}, False),
    ("order.kind = 'vip'", {"order.kind": "vip"}, True),
    ("a = 1L", {"a": "1"}, True),
    ("a > 1e2", {"a": "101"}, True),
]


@pytest.mark.parametrize("expression,props,expected", TABLE)
def test_table(expression, props, expected):
    assert SqlFilter.parse(expression).matches(props) is expected


# (expression, position of the error, words the message must contain)
BAD = [
    ("", 0, "empty"),
    ("a >", 3, "ends too early"),
    ("a = 'abc", 4, "not closed"),
    ("a > 'abc'", 2, "numbers"),
    ("a BETWEEN 1 2", 12, "expected AND"),
    ("a IN (1, 2)", 6, "string literals"),
    ("a IN ('x' 'y')", 10, "')'"),
    ("a IS 5", 5, "expected NULL"),
    ("a", 1, "expected a comparison"),
    ("a = 1 b = 2", 6, "expected AND, OR"),
    ("a = 1 AND", 9, "ends too early"),
    ("(a = 1", 6, "')'"),
    ("a # 1", 2, "unexpected character"),
    ("a NOT = 1", 6, "after NOT"),
    ("TAGS BETWEEN 'a' AND 'b'", 13, "numbers"),
]


@pytest.mark.parametrize("expression,position,words", BAD)
def test_bad_expressions_name_the_position(expression, position, words):
    with pytest.raises(InvalidFilterExpressionError) as e:
        SqlFilter.parse(expression)
    assert e.value.position == position
    assert words in str(e.value)
    assert f"position {position}" in str(e.value)


def test_compiled_once_reused_for_many_property_sets():
    f = SqlFilter.parse("a between 0 and 3 and TAGS in ('A')")
    hits = [f.matches({"a": str(i), "TAGS": "A"}) for i in range(6)]
    assert hits == [True, True, True, True, False, False]


@pytest.mark.parametrize("expression,tags", [
    ("TAGS = 'A'", {"A"}),
    ("TAGS IN ('A', 'B') AND a > 1", {"A", "B"}),
    ("a > 1 AND (TAGS = 'A' OR TAGS = 'B')", {"A", "B"}),
    ("TAGS IN ('A', 'B') AND TAGS IN ('B', 'C')", {"B"}),
    ("TAGS = 'A' OR a > 1", None),          # a message with any tag can match
    ("NOT TAGS = 'A'", None),
    ("TAGS NOT IN ('A')", None),
    ("a > 1", None),
])
def test_tag_prefilter_only_where_the_expression_pins_tags(expression, tags):
    from raftmq.store.java import java_string_hash

    f = SqlFilter.parse(expression)
    assert f.tag_codes == (None if tags is None else frozenset(java_string_hash(t) for t in tags))
    if tags is not None:
        assert not f.matches_code(java_string_hash("Z")) and not f.matches_code(0)
        assert all(f.matches_code(java_string_hash(t)) for t in tags)


def test_store_skips_units_by_tag_code_and_still_checks_properties(tmp_path):
    from raftmq.store import Message, MessageStore, StoreConfig
    from tests.support.waiting import wait_for

    with MessageStore(StoreConfig(root_dir=str(tmp_path), preallocate=False,
                                  mapped_file_size_commit_log=1 << 20)) as st:
        st.put_messages([Message(topic="T", body=b"%d" % i, properties={"TAGS": "AB"[i % 2], "n": str(i)})
                         for i in range(10)])
        wait_for(lambda: st.max_offset_in_queue("T", 0) == 10, "dispatched")
        got = st.get_messages("T", 0, 0, 32, message_filter=SqlFilter.parse("TAGS = 'B' AND n > 4"))
        assert [m.body for m in got.messages] == [b"5", b"7", b"9"]
