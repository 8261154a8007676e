-- akadzed 005_limit_window_bound: a start-rate window of at most about 100 years.
--
-- Every claim and the pruner count a key's starts since now() - its window.
-- PostgreSQL's intervals reach 178,000,000 years, its timestamps only 4713
-- BC, so a window of a few thousand years made now() - window fail ("timestamp
-- out of range"): every claim that met the key failed, for every key counted
-- in the same statement, and pruning of start marks stopped for good
-- (docs/reliability.md, "Extreme values"). Intervals compare as if a month
-- were 30 days, so '70000000 months -2099990000 days' is "27 years" to <=
-- and still out of range for now() -: the check subtracts the window from
-- 2000-01-01 as now() - window does, months first, and wants 1900 or later
-- (a window that cannot be subtracted at all fails the check's expression,
-- which refuses the row as well). A window past 100 years means "never
-- again" as well as any longer one, so existing longer (or unsubtractable)
-- windows are cut to 100 years. akadze.limits is akadzed's own table
-- (003_limit_keys): no akadze write is affected.
DO $$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT key, starts_window FROM akadze.limits WHERE starts_window IS NOT NULL LOOP
        BEGIN
            IF '2000-01-01 00:00:00'::timestamp - r.starts_window < '1900-01-01 00:00:00'::timestamp THEN
                UPDATE akadze.limits SET starts_window = interval '100 years' WHERE key = r.key;
            END IF;
        EXCEPTION WHEN datetime_field_overflow OR interval_field_overflow THEN
            UPDATE akadze.limits SET starts_window = interval '100 years' WHERE key = r.key;
        END;
    END LOOP;
END $$;
ALTER TABLE akadze.limits ADD CONSTRAINT limits_starts_window_max_check
    CHECK ('2000-01-01 00:00:00'::timestamp - starts_window >= '1900-01-01 00:00:00'::timestamp);
