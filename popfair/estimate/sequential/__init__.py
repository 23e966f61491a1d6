"""Anytime-valid confidence sequences and the stopping rules of sequential audits."""
