"""Path-specific effects (TE, NDE, NIE, BIE, RIE): DML-UCA on factual data, the interventional
(counterfactual-world) design, and what both share: the SFM roles, the estimand, identification."""
