"""The zkrecipes benchmark (issue 7); run ``python bench/run.py`` or ``make bench``."""
