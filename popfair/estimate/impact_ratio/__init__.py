"""Impact ratios (NYC Local Law 144): selection and scoring rates by category, CIs and a test that
account for the choice of the reference category, tables over periods and their change."""
