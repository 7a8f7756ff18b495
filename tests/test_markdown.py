"""Tables the report and identification write keep their columns whatever a value holds."""

from markdown_it import MarkdownIt

from common.markdown import markdown_table


def test_a_bar_in_a_header_or_a_cell_keeps_the_columns():
    table = markdown_table(["server", "aioquic|kwik"], [["a|b", "line\nbreak"], [None, 2]])
    html = MarkdownIt().enable("table").render(table)
    assert html.count("<th>") == 2 and html.count("<td>") == 4
    assert "<th>aioquic|kwik</th>" in html and "<td>a|b</td>" in html
