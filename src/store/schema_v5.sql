-- Schema v5: the trigram index is no longer written by a trigger per inserted memory.
--
-- The store's writer indexes each batch's new memories at once, at the end of the batch and
-- inside its transaction (`search::index_pending`): FTS5 flushes its pending terms at every
-- savepoint, and every write job runs in a savepoint of its own, so the trigger wrote one
-- segment per memory. The rows and their index entries still commit together.
DROP TRIGGER memories_fts_insert;
