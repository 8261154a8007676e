-- akadzed 005_limit_window_bound: a start-rate window at most 100 years.
--
-- Every claim and the pruner count a key's starts since now() - its window.
-- PostgreSQL's intervals reach 178,000,000 years, its timestamps only 4713
-- BC, so a window of a few thousand years made now() - window fail ("timestamp
-- out of range"): every claim that met the key failed, for every key counted
-- in the same statement, and pruning of start marks stopped for good
-- (docs/reliability.md, "Extreme values"). A window past 100 years means
-- "never again" as well as any longer one, so existing longer windows are cut
-- to 100 years and longer ones are refused from now on. akadze.limits is
-- akadzed's own table (003_limit_keys): no akadze write is affected.
UPDATE akadze.limits SET starts_window = interval '100 years'
    WHERE starts_window > interval '100 years';
ALTER TABLE akadze.limits ADD CONSTRAINT limits_starts_window_max_check
    CHECK (starts_window <= interval '100 years');
