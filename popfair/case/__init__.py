"""One audit case composed from config and run. `base`: the contract every kind of case keeps (`Case`:
run, plan, describe; its `CaseResult`; `CaseSettings`; the registry of case kinds); `compose`: the one
door from config to a built case. The kinds: the generated case (`population`: population -> render
-> screen -> estimate), the case of an existing decision table (`table`); and the export of a case's
documents for an upload-only tool (`export`)."""
