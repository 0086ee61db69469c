"""Helpers that several test modules share; no test module imports another test module.

- `tests.helpers.waiting`: `wait_until`, the one polling loop (a deadline guards against hangs;
  it is never the synchronisation itself).
- `tests.helpers.studies`: synthetic study configs, reading and comparing stores, the paper's
  fourteen algorithms written out.
- `tests.helpers.interrupts`: drivers of ``oodeval study run`` that a test stops, finding
  every process of one study.
- `tests.helpers.training`: tiny synthetic scenarios for the trainer.
- `tests.helpers.mnist`: a fake MNIST test split in IDX format.
- `tests.helpers.images`: `write_domain_tree`, a tiny ``<domain>/<class>/<image>`` PNG tree.
- `tests.helpers.browser`: a headless Chromium look at a local HTML page.
- `tests.helpers.cli`: `invoke` (``oodeval ARGV`` in-process, as the console script runs it)
  and `assert_refused` (the bad-input contract: one ``error:`` line, exit 2, no traceback).
- `tests.helpers.memory`: `run_limited` (``oodeval ARGV`` in a child with its address space
  capped, reporting peak memory) and `capped` (the same cap around an in-process block).
- `tests.helpers.hostile`: hostile files made at test time (gzip bombs, array and IDX headers
  that claim more than the file holds).
- `tests.helpers.fuzz`, `tests.helpers.fuzz_config`: Hypothesis strategies for results files,
  open-world predictions and study configs, valid and broken, and `fuzz_settings`.

``tests/requires.py`` stays where it is (the root ``conftest.py`` imports it) and so do the study
backends ``tests/*_backend.py``: configs name them by module (``backend =
"tests.checkpoint_backend"``), stored stores and fixtures included.
"""
