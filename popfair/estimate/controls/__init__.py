"""Controls that make a finding believable: placebo edits (how far an irrelevant edit moves the
screener) and name-level effects (whether one name carries a gap). docs/concepts/controls.md"""
