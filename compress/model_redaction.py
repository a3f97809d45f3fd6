"""What a model wrote, redacted as ingest redacts what arrives.

Ingest removes the secrets a tool use holds before anything is stored or sent to a model
(:mod:`sessionmem.redaction`), but only those it can read: a key held hex- or base64-encoded,
or in pieces, passes it as random-looking text. A model reading that output may decode it,
or piece it together, and write it into an observation or a summary. So every text field a
model wrote goes through the same redactor before it is stored (secrets never reach disk);
what the rules wrote from already-redacted data is left as it is.
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from sessionmem.records import CompressedObservation, CompressedSummary, Provenance

OBSERVATION_TEXTS = ("title", "subtitle", "narrative")
OBSERVATION_LISTS = ("facts", "concepts", "files_read", "files_modified")
SUMMARY_TEXTS = ("request", "investigated", "learned", "completed", "next_steps", "notes")


def redacted_observation(observation: CompressedObservation,
                         redact: Callable[[str], str]) -> CompressedObservation:
    """``observation`` with each text a model wrote passed through ``redact`` (the ingest redactor's ``text``)."""
    if observation.provenance != Provenance.MODEL:
        return observation
    changes: dict[str, object] = {name: redact(getattr(observation, name)) for name in OBSERVATION_TEXTS}
    changes.update({name: tuple(redact(item) for item in getattr(observation, name)) for name in OBSERVATION_LISTS})
    return msgspec.structs.replace(observation, **changes)


def redacted_summary(summary: CompressedSummary, redact: Callable[[str], str]) -> CompressedSummary:
    """``summary`` with each text a model wrote passed through ``redact``."""
    if summary.provenance != Provenance.MODEL:
        return summary
    return msgspec.structs.replace(summary, **{name: redact(getattr(summary, name)) for name in SUMMARY_TEXTS})
