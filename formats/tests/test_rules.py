"""The value rules PDF import/export and the XFDF codec share (one implementation each):
dates, colours, /DA, CSS, rich text, untrusted XML. Each case is one that either side
relied on before the two were merged."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from layersync_formats.richtext import (css_style, free_text_style, instant_to_rich_text, parse_css_style,
                                        parse_rich_text, rich_body, rich_text_plain, rich_text_to_instant,
                                        xhtml_inner)
from layersync_formats.safexml import XmlRefused, parse_untrusted
from layersync_formats.values import (PageBox, components_to_hex, default_appearance, hex_to_rgb, iso_to_pdf_date,
                                      number_text, parse_default_appearance, pdf_date_to_iso, same_json)


def test_pdf_dates_both_ways():
    assert pdf_date_to_iso("D:20251214212208+01'00'") == "2025-12-14T20:22:08Z"
    assert pdf_date_to_iso("D:2025") == "2025-01-01T00:00:00Z"
    assert pdf_date_to_iso("D:20250230") is None and pdf_date_to_iso(None) is None
    assert iso_to_pdf_date("2025-12-14T21:22:08+01:00") == "D:20251214202208Z"
    assert iso_to_pdf_date("yesterday") is None and iso_to_pdf_date(None) is None


def test_colours_gray_rgb_cmyk_and_hex():
    assert components_to_hex([0.5]) == "#808080"
    assert components_to_hex([1, 0, 2]) == "#FF00FF"  # clamped
    assert components_to_hex([0, 1, 1, 0]) == "#FF0000"
    assert components_to_hex([]) is None
    assert hex_to_rgb("#00a000") == [0.0, 0.6275, 0.0] and hex_to_rgb("green") is None


def test_default_appearance_both_ways():
    assert parse_default_appearance("0 0 0 rg /Helv 10.5 Tf") == {"font": "Helv", "fontSize": 10.5,
                                                                   "fontColor": "#000000"}
    assert parse_default_appearance("/Cour 9 Tf 0.5 g")["fontColor"] == "#808080"
    assert default_appearance("Helvetica", 14, "#00A000") == "/Helvetica 14 Tf 0 0.6275 0 rg"
    assert default_appearance("Times New Roman", None, None) == "/Helv 12 Tf 0 0 0 rg"
    assert number_text(1e7) == "10000000" and number_text(-0.00001) == "0"
    with pytest.raises(ValueError):
        number_text(float("inf"))


def test_css_reads_what_pdf_and_xfdf_writers_write():
    acrobat = "font: Helvetica,sans-serif 14.0pt; text-align:center; color:#00AA00"
    assert parse_css_style(acrobat) == {"font": "Helvetica", "fontSize": 14.0, "fontColor": "#00AA00",
                                        "horizontalAlign": "center"}
    assert parse_css_style("font-size: 16px; color: rgb(255, 0, 0); font-weight: 700; font-style: italic") == \
        {"fontSize": 12.0, "fontColor": "#FF0000", "fontStyle": ["bold", "italic"]}
    assert parse_css_style("color: #f00; color: #00F") == {"fontColor": "#0000FF"}  # the later wins
    assert css_style("Helvetica", 14, "#00A000") == "font: Helvetica 14pt; color: #00A000"


@given(st.text(min_size=1, max_size=20), st.integers(1, 200), st.integers(0, 0xFFFFFF),
       st.sets(st.sampled_from(["bold", "italic"])), st.sampled_from([None, "left", "center", "right"]))
def test_css_written_is_read_back(font, size, color, styles, align):
    hex_color = f"#{color:06X}"
    back = parse_css_style(css_style(font, size, hex_color, styles, align))
    assert back["fontSize"] == size and back["fontColor"] == hex_color
    assert back["font"] in (font.strip(), "Helvetica")
    assert back.get("fontStyle", []) == [s for s in ("bold", "italic") if s in styles]
    assert back.get("horizontalAlign") == align


def test_free_text_style_rc_over_ds_over_da():
    rich = parse_rich_text('<body xmlns="http://www.w3.org/1999/xhtml" style="font-size:14pt">'
                           '<p style="color:#00A000">Green</p></body>')
    assert free_text_style("1 0 0 rg /Helv 12 Tf", "font: Helvetica 13pt", rich) == \
        {"font": "Helvetica", "fontSize": 14.0, "fontColor": "#00A000"}
    assert free_text_style("1 0 0 rg /Helv 12 Tf", "font-weight: bold") == \
        {"font": "Helv", "fontSize": 12.0, "fontColor": "#FF0000"}


def test_rich_text_fragment_plain_text_and_body():
    rc = ('<?xml version="1.0"?><body xmlns="http://www.w3.org/1999/xhtml" style="color:#00A000">'
          '<p dir="ltr">Zoë <b>bold</b>&#46;</p><p>line<br/>2</p></body>')
    fragment, plain, style = rich_text_to_instant(rc)
    assert fragment == '<p dir="ltr">Zoë <b>bold</b>&#46;</p><p>line<br/>2</p>'  # exactly as written
    assert plain == "Zoë bold.\nline\n2" and style == "color:#00A000"
    written, plain_again = instant_to_rich_text(fragment, "font: Helvetica 12pt")
    assert 'style="font: Helvetica 12pt"' in written and plain_again == plain
    body = rich_body(fragment)
    assert xhtml_inner(body) == '<p dir="ltr">Zoë <b>bold</b>.</p><p>line<br/>2</p>'
    assert rich_text_plain(body) == plain
    assert instant_to_rich_text("<p>unclosed") is None and rich_body("<p>unclosed") is None


BOMB = ('<!DOCTYPE b [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">]>'
        "<body><p>&b;</p></body>")
EXTERNAL = '<!DOCTYPE b [<!ENTITY x SYSTEM "file:///etc/passwd">]><body>&x;</body>'


@pytest.mark.parametrize("document", [BOMB, EXTERNAL, "<body>" * 65 + "</body>" * 65, "<body><p></body>",
                                      "<body>&nbsp;</body>",
                                      b'<?xml version="1.0" encoding="x-nonsense"?><body/>'],
                         ids=["entity-expansion", "external-entity", "too-deep", "not-well-formed",
                              "undefined-entity", "unknown-encoding"])
def test_untrusted_xml_is_refused_for_rich_text_and_xfdf_alike(document):
    with pytest.raises(XmlRefused):
        parse_untrusted(document)
    assert parse_rich_text(document) is None


def test_page_box_quads():
    box = PageBox((-20, 30, 592, 822))
    quads = box.rects_to_quads([[10, 20, 100, 12]])
    assert quads == [-10, 802, 90, 802, -10, 790, 90, 790] and box.quads_to_rects(quads) == [[10, 20, 100, 12]]
    assert PageBox.at({1: (0, 0, 100, 100)}, 1).point_to_instant(10, 90) == [10, 10]
    assert PageBox.at(None, 3).y1 == 792


def test_same_json_tells_json_values_apart_where_python_equality_does_not():
    """``same_json`` is the one test of "content unchanged" (server and bindings): a
    boolean, an integer and a float are different JSON even where ``==`` says equal."""
    differ = [(0, False), (1, True), (1, 1.0), (0.0, -0.0), ({"a": 0}, {"a": False}),
              ([1, True], [1, 1]), ({"a": [0.0]}, {"a": [-0.0]}), ([1, 2], [2, 1]), ({"a": 1}, {"a": 1, "b": 2})]
    for a, b in differ:
        assert not same_json(a, b) and not same_json(b, a), (a, b)
    same = [({"a": 1, "b": [True, None]}, {"b": [True, None], "a": 1}), (2.5, 2.5), ("x", "x"), (None, None)]
    for a, b in same:
        assert same_json(a, b) and same_json(b, a), (a, b)
    assert same_json(float("nan"), float("nan")) is False  # a NaN is the same as nothing


def test_same_json_untyped_compares_numbers_by_value_and_nothing_else():
    """``typed_numbers=False`` (XFDF, whose numbers have no type): an int and a float of
    equal value are the same, at any depth; booleans, strings and structure still count."""
    same = [(1, 1.0), (0, -0.0), (0.0, -0.0), ([10, 20.5], [10.0, 20.5]), ({"a": {"b": [3]}}, {"a": {"b": [3.0]}})]
    for a, b in same:
        assert same_json(a, b, typed_numbers=False) and same_json(b, a, typed_numbers=False), (a, b)
    differ = [(0, False), (1, True), (1.0, True), ([1], [True]), (1, 1.5), ("1", 1), ({"a": 1}, {"a": 1, "b": 1}),
              ([1, 2], [2.0, 1.0])]
    for a, b in differ:
        assert not same_json(a, b, typed_numbers=False) and not same_json(b, a, typed_numbers=False), (a, b)
    assert same_json(float("nan"), float("nan"), typed_numbers=False) is False

