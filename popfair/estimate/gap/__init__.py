"""Differences in outcome between two groups: the paired gap (McNemar, clustered) and the outcome gap."""
