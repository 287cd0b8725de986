"""``dispatch_properties`` (reput's property lookup) against the full parse it shortcuts."""

from hypothesis import given, settings
from hypothesis import strategies as st

from raftmq.store.dispatch import dispatch_properties
from raftmq.store.message import string_to_properties

# pieces that make property strings odd in every way the parser cares about: separators in any place,
# repeated and empty values, keys that are prefixes or extensions of the wanted ones, non-ASCII text
_PIECES = st.sampled_from(
    ["TAGS", "KEYS", "UNIQ_KEY", "\x01", "\x02", "a", "b c", "é中", "\U0001f600", " ", "TAG", "KEYSX", "XKEYS",
     "UNIQ", "_KEY", "\x01\x01", "\x02\x02"]
)


def _expected(props: str) -> tuple:
    m = string_to_properties(props)
    return m.get("TAGS"), m.get("KEYS"), m.get("UNIQ_KEY")


@settings(max_examples=2000, deadline=None)
@given(st.lists(_PIECES, max_size=16).map("".join))
def test_equals_the_parsed_map_on_odd_property_strings(props):
    assert dispatch_properties(props) == _expected(props)


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_equals_the_parsed_map_on_any_text(props):
    assert dispatch_properties(props) == _expected(props)


def test_last_non_empty_value_wins():
    props = "KEYS\x01first\x02TAGS\x01t1\x02KEYS\x01second\x02TAGS\x01\x02UNIQ_KEY\x01u\x01v\x02KEYS\x01"
    assert dispatch_properties(props) == ("t1", "second", "u\x01v")
    assert dispatch_properties("") == (None, None, None)
    assert dispatch_properties("XTAGS\x01a\x02 KEYS\x01b") == (None, None, None)  # not at a segment start
