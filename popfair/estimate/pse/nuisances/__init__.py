"""The nuisance models the DML estimators fit: role encoding and folds (`encoding`), the XGBoost
propensity and outcome models (`models`) and their on-disk cache (`cache`)."""
