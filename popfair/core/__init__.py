"""The vocabulary every layer shares: the typed records between stages (`types`), the errors popfair
raises (`errors`), the declarative rules settings must satisfy (`constraints`), race coding schemes
(`race_coding`) and lazy re-exports (`lazy`). It imports nothing else of popfair."""
