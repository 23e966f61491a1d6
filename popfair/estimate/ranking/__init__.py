"""The ranking audit's estimator (`estimator=ranking`), its model and its power calculation."""
