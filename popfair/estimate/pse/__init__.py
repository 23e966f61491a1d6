"""Path-specific effects (TE, NDE, NIE, BIE, RIE). At this level, what every estimator of the
family shares: the SFM roles (`sfm`), what an effect means in a case (`estimand`), when it is
identified (`identification`), the settings (`settings`) and simulated truths (`simulate`). Below,
one folder per way of estimating: `dml/` (DML-UCA on factual data), `design/` (counterfactual
worlds), `paper/` (the authors' estimator), and `nuisances/` (the models DML fits)."""
