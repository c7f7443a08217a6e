-- Schema v13: recurring reminders (`set-reminder --every`). A series is one row: after each
-- delivery its `scheduled_at` moves to the next occurrence and it stays pending, until its
-- count or end date is reached (then `delivered`) or it is cancelled (the whole series). The
-- repetition is kept as given: every day, week or month at the wall-clock time of the first
-- occurrence (`recur_first`) in the IANA zone `recur_zone`. `occurrences` counts deliveries.
-- A one-time reminder has no `recur_every`; existing rows are one-time reminders.
ALTER TABLE reminders ADD COLUMN recur_every TEXT CHECK (recur_every IN ('day', 'week', 'month'));
ALTER TABLE reminders ADD COLUMN recur_zone TEXT;
ALTER TABLE reminders ADD COLUMN recur_first INTEGER;
ALTER TABLE reminders ADD COLUMN recur_until INTEGER;
ALTER TABLE reminders ADD COLUMN recur_count INTEGER CHECK (recur_count IS NULL OR recur_count >= 1);
ALTER TABLE reminders ADD COLUMN occurrences INTEGER NOT NULL DEFAULT 0 CHECK (occurrences >= 0);
