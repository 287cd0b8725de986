"""client.render: what a producer's bytes may do to an operator's terminal (nothing), in isolation."""

from raftmq.client.render import body_text, escape, hexdump, is_binary


def test_escape_sequences_and_bidi_overrides_become_visible():
    evil = "\x1b[2K\r\x1b[31mFAKE: all replicas identical\x07\u202e"
    out = escape(evil)
    assert "\x1b" not in out and "\r" not in out and "\x07" not in out and "\u202e" not in out
    assert out == "\\x1b[2K\\r\\x1b[31mFAKE: all replicas identical\\x07\\u202e"


def test_multi_line_keeps_newlines_and_tabs_but_not_carriage_returns():
    assert escape("a\n\tb\rc\x9b", one_line=False) == "a\n\tb\\rc\\x9b"
    assert escape("a\nb") == "a\\nb"


def test_binary_is_a_hexdump_cut_with_a_note():
    body = bytes(range(256)) * 4
    assert is_binary(body) and not is_binary("héllo".encode())
    out = body_text(body)
    assert out.splitlines()[0].startswith("00000000  00 01 02 03 04 05 06 07  08 09 0a 0b 0c 0d 0e 0f  |")
    assert "768 more bytes of 1024" in out and "--full" in out and "--body-file" in out
    assert len(body_text(body, full=True).splitlines()) == 64
    assert hexdump(b"Hi\x00") == "00000000  48 69 00" + " " * 40 + "  |Hi.|"


def test_long_text_is_cut_unless_full():
    body = ("x" * 5000).encode()
    assert "2952 more characters of 5000" in body_text(body)
    assert body_text(body, full=True) == "x" * 5000
