"""What a run produced, for people: a summary table or JSON (tables.py), and the HTML report
(page.py) with its figures (plots.py) from what the records say (history.py)."""
