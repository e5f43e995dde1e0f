"""Privacy accounting: DpEvents, one ledger over dp_accounting, calibration, the papers' closed forms."""
