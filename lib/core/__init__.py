"""What every layer shares: where things are (paths), the stage and chapter registries, the params
files and their checks, the record type, the training text, kernel categories and provenance stamps.
Imports nothing else of lib/."""
