"""Result records and what is decided from them: the store on disk (store), the statistics a record
carries (stats), process-to-process noise (noise), the paired parity test (parity) and the table and
recommendation (decide). Imports only lib.core."""
