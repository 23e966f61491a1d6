"""One audit case composed from config and run: the generated case (`experiment`: population ->
render -> screen -> estimate), the case of an existing decision table (`table`), and the export of a
case's documents for an upload-only tool (`export`)."""
