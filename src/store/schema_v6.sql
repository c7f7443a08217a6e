-- Schema v6: new memories wait in `index_queue` for both full-text indexes.
--
-- Until v5 the writer indexed each batch's new memories at the end of that batch. Each batch
-- then wrote a new segment into both indexes, a third of the writer's CPU per save when
-- batches are small. Now a memory's queue row commits with the memory, and the writer indexes
-- the queue once it holds enough rows, when it is idle, when a search of that workspace finds
-- rows waiting, and before a checkpoint or close (`search::index`). The queue is a table, not
-- a temporary one, so rows acknowledged before a crash are still indexed after it.
CREATE TABLE index_queue (
    seq   INTEGER PRIMARY KEY,
    grams TEXT    NOT NULL
);
