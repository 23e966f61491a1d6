"""The PopResume authors' own estimator (estimator=pse_paper): resample-and-refit iterations
(`estimator`), their XGBoost grid search (`tuning`), and its price and progress (`progress`)."""
