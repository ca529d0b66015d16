"""Exports never carry a cell that a spreadsheet would run as a formula."""

from apps.core.exports import spreadsheet_safe


def test_text_that_starts_like_a_formula_is_written_as_text():
    assert spreadsheet_safe('=HYPERLINK("http://x")') == '\'=HYPERLINK("http://x")'
    assert [spreadsheet_safe(v) for v in ("+A1", "-cmd", "@SUM(A1)")] == ["'+A1", "'-cmd", "'@SUM(A1)"]


def test_numbers_and_plain_text_are_unchanged():
    assert spreadsheet_safe(-3) == -3 and spreadsheet_safe("Pretraining") == "Pretraining"
    assert spreadsheet_safe("-0.028") == "-0.028"
