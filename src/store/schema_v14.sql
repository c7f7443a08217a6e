-- Schema v14: voice, metered with the tokens in `llm_usage` (per workspace and UTC day):
-- milliseconds of audio transcribed for the user (`audio_in_ms`, what
-- `attachments.transcription.minutesPerUserPerDay` limits) and how many transcriptions, and
-- milliseconds of speech synthesised for replies (`audio_out_ms`) and how many. A row written
-- only for voice has no tokens and no requests.
ALTER TABLE llm_usage ADD COLUMN audio_in_ms INTEGER NOT NULL DEFAULT 0 CHECK (audio_in_ms >= 0);
ALTER TABLE llm_usage ADD COLUMN transcriptions INTEGER NOT NULL DEFAULT 0 CHECK (transcriptions >= 0);
ALTER TABLE llm_usage ADD COLUMN audio_out_ms INTEGER NOT NULL DEFAULT 0 CHECK (audio_out_ms >= 0);
ALTER TABLE llm_usage ADD COLUMN speeches INTEGER NOT NULL DEFAULT 0 CHECK (speeches >= 0);
