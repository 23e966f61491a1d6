"""The paired correspondence audit ("Can LLMs Hire Fairly?"): identical profiles that differ only in
a race- or gender-coded name (`population`), one profile per prompt, a yes/no callback (`design`),
the paired gap with McNemar and posting-cluster inference (popfair.estimate.gap.paired)."""
