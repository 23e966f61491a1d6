"""DML-UCA on factual data (estimator=pse_dml, the PopResume paper's estimator): the cross-fitted
scores (`scores`) and the estimator that gates, explains and reports them (`estimator`)."""
