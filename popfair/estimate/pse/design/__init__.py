"""Effects measured by design on popfair's counterfactual worlds (the screener re-reads each
applicant's five resumes): the counterfactual design (`counterfactual`, the population audit's
default) with its two-part variance (`design_based`) and budget (`budget`); the all-applicant
interventional design (`interventional`); DML-UCA beside it (`side_by_side`, estimator=both)."""
