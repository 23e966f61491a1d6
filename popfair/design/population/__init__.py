"""The population audit (PopResume): one resume per prompt, a 0-100 score; its power line and its
sequential audit (planning.py)."""
