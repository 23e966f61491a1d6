"""How popfair runs as a program: where its config is (`paths`), API keys from the environment
(`secrets`) and the route they choose (`routes`), forked workers (`parallel`), signals
(`interrupts`), what every entry point shares (`entry`, `cli_help`), the version, and the declared
layers of the package (`architecture`)."""
