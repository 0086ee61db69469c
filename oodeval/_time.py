"""UTC time stamps: the one home of every "now" oodeval writes.

Three spellings of the current UTC time, each for one kind of place:

- `utc_timestamp`: ISO 8601 to the second with its offset, ``2025-01-01T12:00:00+00:00``: the
  store's time stamps (unit start/finish, config history, quarantine), the study lock's record.
- `utc_file_stamp`: compact, safe in a file name, ``20250101T120000Z``: the name of a damaged
  store kept beside its rebuild.
- `utc_minute_stamp`: for people, to the minute, ``2025-01-01 12:00 UTC``: the "generated" line
  of an HTML report.

Standard library only, so any module may import it.
"""

from __future__ import annotations

from datetime import datetime, timezone


def _utc_now() -> datetime:
    return datetime.now(timezone.utc)


def utc_timestamp() -> str:
    """The current UTC time, ISO 8601 to the second: ``YYYY-MM-DDTHH:MM:SS+00:00``.

    >>> stamp = utc_timestamp()
    >>> len(stamp), stamp[10], stamp[-6:]
    (25, 'T', '+00:00')
    """
    return _utc_now().isoformat(timespec="seconds")


def utc_file_stamp() -> str:
    """The current UTC time for a file name: ``YYYYMMDDTHHMMSSZ`` (no ``:`` or space).

    >>> stamp = utc_file_stamp()
    >>> len(stamp), stamp[8], stamp[-1]
    (16, 'T', 'Z')
    """
    return _utc_now().strftime("%Y%m%dT%H%M%SZ")


def utc_minute_stamp() -> str:
    """The current UTC time for a reader, to the minute: ``YYYY-MM-DD HH:MM UTC``.

    >>> stamp = utc_minute_stamp()
    >>> len(stamp), stamp[-4:]
    (20, ' UTC')
    """
    return _utc_now().strftime("%Y-%m-%d %H:%M UTC")
