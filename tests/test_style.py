"""Style features of answers (length and markdown), as Chatbot Arena's conv_metadata counts them."""

from __future__ import annotations

from flywheel.ground.style import conv_metadata, style_of, vectors_from_metadata


def test_style_counts_headers_lists_bold_and_tokens():
    text = "# Title\n## Part\nSome **bold** and __also__ text.\n- one\n* two\n1. first\n2. second\n"
    s = style_of(text)
    assert s.headers["h1"] == 1 and s.headers["h2"] == 1 and sum(s.headers.values()) == 2
    assert s.lists == {"ordered": 2, "unordered": 2}
    assert s.bold == {"**": 1, "__": 1}
    assert s.vector() == (s.tokens, 2, 4, 2)
    assert style_of("Hello, world!").tokens == 4  # Hello , world !


def test_code_blocks_do_not_count_as_markdown_but_count_as_tokens():
    code = "Run this:\n```\n# not a header\n- not a list\n```\n"
    s = style_of(code)
    assert s.vector()[1:] == (0, 0, 0)
    assert s.tokens > style_of("Run this:").tokens
    assert style_of("").vector() == (0, 0, 0, 0)


def test_conv_metadata_round_trips_to_vectors():
    meta = conv_metadata("**a** b", "# c\n- d\n- e")
    assert vectors_from_metadata(meta) == ((style_of("**a** b").tokens, 0, 0, 1), (style_of("# c\n- d\n- e").tokens, 1, 2, 0))
    # Chatbot Arena's logs may hold plain totals instead of per-kind dicts.
    flat = {"sum_assistant_a_tokens": 5, "sum_assistant_b_tokens": 7, "header_count_a": 1, "header_count_b": 0,
            "list_count_a": {"ordered": 1, "unordered": 2}, "list_count_b": 0, "bold_count_a": 0, "bold_count_b": 3}
    assert vectors_from_metadata(flat) == ((5, 1, 3, 0), (7, 0, 0, 3))
