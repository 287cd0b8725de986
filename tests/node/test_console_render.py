"""The console's safe rendering: everything a producer controls is escaped, made visible, or cut."""

from __future__ import annotations

import re
import threading

import pytest

from raftmq.node.console import safe
from raftmq.node.console.charts import Series, line_chart
from raftmq.node.console.history import History, Sample, rates
from raftmq.node.console.layout import table


def test_esc_escapes_html_and_quotes():
    out = safe.esc("<script>alert('x')</script> & \"q\"")
    assert out == "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt; &amp; &quot;q&quot;"


def test_esc_makes_terminal_and_bidi_controls_visible():
    out = safe.esc("a\x1b[31mred\x07\x00\x7f\x85\u202eevil\u200b\ufeffz")
    assert "\x1b" not in out and "\u202e" not in out and "\x00" not in out and "\x85" not in out
    assert out == "a\\x1b[31mred\\x07\\x00\\x7f\\x85\\u202eevil\\u200b\\ufeffz"


def test_esc_keeps_newlines_tabs_and_ordinary_unicode():
    assert safe.esc("line 1\n\tline 2 – ünïcødé 日本 🙂") == "line 1\n\tline 2 – ünïcødé 日本 🙂"


def test_markup_passes_through_once_and_html_escapes_arguments():
    inner = safe.html("<b>{}</b>", "<i>")
    assert inner == "<b>&lt;i&gt;</b>"
    assert safe.html("<p>{}</p>", inner) == "<p><b>&lt;i&gt;</b></p>"  # not escaped twice
    assert safe.html('<a href="{}">{}</a>', '" onmouseover="x', "t") == \
        '<a href="&quot; onmouseover=&quot;x">t</a>'
    assert safe.html("{:.1f} {}", 2.25, 3) == "2.2 3"  # numbers keep their format specs


def test_text_body_is_escaped_with_controls_highlighted():
    body = b"<script>x</script>\x1b[2K\r\x1b[31mFAKE\n"
    view = safe.render_body(body)
    assert view.kind == "text" and not view.truncated and view.size == len(body)
    assert "<script>" not in view.html
    assert "&lt;script&gt;x&lt;/script&gt;" in view.html
    assert '<span class="ctl">\\x1b</span>[2K<span class="ctl">\\x0d</span>' in view.html
    assert "\x1b" not in view.html and "\r" not in view.html


def test_binary_body_is_a_hexdump_with_escaped_ascii_column():
    body = b"<a>\x00\x01\xff" + bytes(range(250))
    view = safe.render_body(body)
    assert view.kind == "binary"
    first = view.html.splitlines()[0]
    assert first.startswith("00000000  3c 61 3e 00 01 ff")
    assert "|&lt;a&gt;...." in first  # the ASCII column is escaped too
    assert len(view.html.splitlines()) == -(-len(body) // 16)


def test_invalid_utf8_is_binary_and_nul_is_binary():
    assert safe.render_body(b"abc\xc3\x28def").kind == "binary"
    assert safe.render_body(b"text with a \x00 nul").kind == "binary"
    assert safe.render_body(b"\x1b" * 50 + b"mostly escapes").kind == "binary"


def test_large_text_body_is_truncated_at_a_character_boundary():
    body = ("é" * 20000).encode()  # 2 bytes a character: the limit falls inside one for an odd limit
    view = safe.render_body(body, text_limit=1001)
    assert view.kind == "text" and view.truncated
    assert view.shown == 1000 and view.size == 40000
    assert view.html == "é" * 500


def test_large_binary_body_is_truncated():
    body = bytes(range(256)) * 100
    view = safe.render_body(body, hex_limit=512)
    assert view.truncated and view.shown == 512
    assert len(view.html.splitlines()) == 32


def test_text_cut_inside_a_character_by_the_sample_is_still_text():
    body = b"a" * 4095 + "é".encode() + b"rest"
    assert safe.is_text(body)


def test_empty_body():
    view = safe.render_body(b"")
    assert view.kind == "empty" and view.size == 0 and not view.truncated


def test_preview_is_one_escaped_line():
    p = safe.preview(b"<b>first</b>\nsecond\r\n\x1bthird", limit=1000)
    assert "\n" not in p and "<b>" not in p
    assert "&lt;b&gt;first&lt;/b&gt;⏎second⏎" in p and '<span class="ctl">\\x1b</span>' in p
    long = safe.preview(b"x" * 500, limit=100)
    assert long.count("x") == 100 and "…" in long
    binary = safe.preview(bytes(range(64)))
    assert "binary" in binary and "00 01 02" in binary and "…" in binary


def test_table_escapes_cells_and_keeps_markup():
    out = table(["<h>", "b"], [["<td>", safe.Markup("<i>ok</i>")]])
    assert "&lt;h&gt;" in out and "&lt;td&gt;" in out and "<i>ok</i>" in out


def test_url_and_segment_quoting():
    assert safe.seg("%DLQ%g/x") == "%25DLQ%25g%2Fx"
    assert safe.url("/ui/messages", by="key", topic="a b", key="", x=None) == "/ui/messages?by=key&topic=a+b"


@pytest.mark.parametrize("n,text", [(0, "0 B"), (1023, "1023 B"), (1536, "1.5 KiB"), (5 << 20, "5.0 MiB")])
def test_human_bytes(n, text):
    assert safe.human_bytes(n) == text


def _sample(at: float, stored: dict, consumed: dict, leader: str = "n0", term: int = 1) -> Sample:
    return Sample(at, term, leader, 0, 0, 0, stored, consumed)


def test_rates_per_topic_and_total_ignore_resets():
    s = [_sample(0, {"a": 0, "b": 0}, {}), _sample(2, {"a": 10, "b": 4}, {}), _sample(4, {"a": 0, "b": 8}, {})]
    assert rates(s, "stored", "a") == [(2, 5.0), (4, 0.0)]
    assert rates(s, "stored") == [(2, 7.0), (4, 2.0)]
    assert rates(s, "stored", {"b", "gone"}) == [(2, 2.0), (4, 2.0)]  # the topics a console user may read
    assert rates(s, "stored", set()) == [(2, 0.0), (4, 0.0)]


def test_history_records_leader_changes():
    seq = iter([_sample(1, {}, {}, "n0", 1), _sample(2, {}, {}, "", 2), _sample(3, {}, {}, "n1", 2)])
    h = History(lambda: next(seq))
    for _ in range(3):
        h.sample_now()
    events = h.snapshot().events
    assert [(e.old, e.new, e.term) for e in events] == [("n0", "", 2), ("", "n1", 2)]
    assert events[1].describe() == "leader (none) → n1 (term 2)"


def test_history_counts_every_takeover_even_beyond_the_events_it_keeps():
    """issue 34: the cluster page's "leader changes seen here" tile counts the same record its list shows (the
    write path's own counter also counted the leader a member found when it started, which the list never
    showed); beyond the events kept, the count still holds every takeover."""
    from raftmq.node.console.history import EVENTS_KEPT

    leaders = ["n0", "n1"] * EVENTS_KEPT + [""]
    seq = iter([_sample(i, {}, {}, leader, i) for i, leader in enumerate(leaders)])
    h = History(lambda: next(seq))
    h.sample_now()  # the leader found at start: not a change seen here
    assert h.snapshot().takeovers == 0 and not h.snapshot().events
    for _ in leaders[1:]:
        h.sample_now()
    snap = h.snapshot()
    assert snap.takeovers == 2 * EVENTS_KEPT - 1  # the loss at the end is an event, not a takeover
    assert len(snap.events) == EVENTS_KEPT


def test_a_short_utf8_body_with_colour_escapes_is_text_not_binary():
    """issue 34: a UTF-8 body with two ANSI escapes was labelled binary (more than 10% control characters);
    the console page's rule (docs/operations/console.md) is "mostly control characters"."""
    body = b"\x1b[31mok\x1b[0m"
    view = safe.render_body(body)
    assert view.kind == "text" and '<span class="ctl">\\x1b</span>[31mok' in view.html
    assert "binary" not in safe.preview(body)
    assert safe.render_body(b"\x1b\x1b\x1bab").kind == "binary"  # mostly control characters


def test_chart_escapes_labels_and_draws_points():
    svg = line_chart([Series("<in>", [(100.0, 1.0), (110.0, 3.0)])], title="t <x>", now=120.0, chart_id="c")
    assert "<in>" not in svg and "&lt;in&gt;" in svg and "t &lt;x&gt;" in svg
    assert len(re.findall(r"<polyline", svg)) == 1
    empty = line_chart([Series("a", [])], title="t", now=120.0)
    assert "collecting samples" in empty


def test_a_live_section_keeps_its_id_so_the_script_can_refresh_it():
    """The section's id and data-live were escaped into text (str + str is no Markup), so the live refresh never
    found the cluster page's member table and the other live sections (found while fixing issue 34)."""
    from raftmq.node.console.layout import section

    out = section("Members", safe.Markup("<table></table>"), "members-section", live=True)
    assert out.startswith('<section id="members-section" data-live="1"><h2>Members</h2>'), out


def test_history_samples_in_the_background_and_stops_without_waiting_out_its_interval():
    """The sampler is a store.service_thread.ServiceThread like every background loop: it samples at once when
    started, and a shutdown cuts its (here ten-minute) sleep short instead of leaving the thread behind."""
    taken = threading.Event()

    def take():
        taken.set()
        return _sample(1, {}, {}, "n0", 1)

    h = History(take, interval=600)
    h.start()
    assert taken.wait(60)
    h.shutdown()
    assert not h.alive and not h.running
    assert len(h.snapshot().samples) == 1
