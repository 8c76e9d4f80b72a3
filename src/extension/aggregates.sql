-- Generated from src/extension/forms.rs by its test `aggregates_sql_is_generated_from_the_forms`
-- (PG_EXP_MECH_WRITE_SQL=1 cargo pgrx test pg15 aggregates_sql rewrites it). Do not edit by hand.
--
-- Transition and selection final functions are version-1 C functions, one symbol per
-- aggregate for all its forms (see arguments.rs). The selection final functions take
-- the aggregate's arguments too (FINALFUNC_EXTRA), so that they can return the
-- polymorphic item type. CREATE AGGREGATE records an aggregate as IMMUTABLE: mod.rs
-- marks them VOLATILE afterwards (two calls are two draws and two charges).

CREATE FUNCTION dp_argmax_trans(state internal, item anyelement, score double precision, epsilon double precision)
    RETURNS internal AS 'MODULE_PATHNAME', 'dp_argmax_trans' LANGUAGE C PARALLEL SAFE;
CREATE FUNCTION dp_argmax_final(state internal, item anyelement, score double precision, epsilon double precision)
    RETURNS anyelement AS 'MODULE_PATHNAME', 'dp_argmax_final' LANGUAGE C PARALLEL SAFE;
CREATE AGGREGATE dp_argmax(item anyelement, score double precision, epsilon double precision) (
    SFUNC = dp_argmax_trans, STYPE = internal, SSPACE = 4096,
    FINALFUNC = dp_argmax_final, FINALFUNC_EXTRA, FINALFUNC_MODIFY = READ_ONLY,
    COMBINEFUNC = dp_item_scores_combine,
    SERIALFUNC = dp_item_scores_serialize, DESERIALFUNC = dp_item_scores_deserialize,
    PARALLEL = SAFE);
COMMENT ON AGGREGATE dp_argmax(anyelement, double precision, double precision) IS
'Differentially private most common item: item i with probability proportional to exp(epsilon * count(i)). Each row adds clamp(score, 0, 1) to its item. epsilon-DP for one row added or removed; the set of items that can win comes from the data (use the candidates form when items are private). NULL when no row. Answers are spelled canonically (numeric 1.00 as 1, float -0 as 0); item types that spell one value several ways otherwise (interval, jsonb, char(n), text under a nondeterministic collation) are refused: list the candidates, cast the items to text, or compare them under COLLATE "C". Items longer than 1 MiB (detoasted) are skipped as NULL items are, and left out of the candidates.';

CREATE FUNCTION dp_argmax_trans(state internal, item anyelement, score numeric, epsilon double precision)
    RETURNS internal AS 'MODULE_PATHNAME', 'dp_argmax_trans' LANGUAGE C PARALLEL SAFE;
CREATE FUNCTION dp_argmax_final(state internal, item anyelement, score numeric, epsilon double precision)
    RETURNS anyelement AS 'MODULE_PATHNAME', 'dp_argmax_final' LANGUAGE C PARALLEL SAFE;
CREATE AGGREGATE dp_argmax(item anyelement, score numeric, epsilon double precision) (
    SFUNC = dp_argmax_trans, STYPE = internal, SSPACE = 4096,
    FINALFUNC = dp_argmax_final, FINALFUNC_EXTRA, FINALFUNC_MODIFY = READ_ONLY,
    COMBINEFUNC = dp_item_scores_combine,
    SERIALFUNC = dp_item_scores_serialize, DESERIALFUNC = dp_item_scores_deserialize,
    PARALLEL = SAFE);
COMMENT ON AGGREGATE dp_argmax(anyelement, numeric, double precision) IS
'Differentially private most common item: item i with probability proportional to exp(epsilon * count(i)). Each row adds clamp(score, 0, 1) to its item. epsilon-DP for one row added or removed; the set of items that can win comes from the data (use the candidates form when items are private). NULL when no row. Answers are spelled canonically (numeric 1.00 as 1, float -0 as 0); item types that spell one value several ways otherwise (interval, jsonb, char(n), text under a nondeterministic collation) are refused: list the candidates, cast the items to text, or compare them under COLLATE "C". Items longer than 1 MiB (detoasted) are skipped as NULL items are, and left out of the candidates. A numeric score is converted to double precision without error (beyond its range it counts as +-Infinity, clamped).';

CREATE FUNCTION dp_argmax_trans(state internal, item anyelement, score double precision, epsilon double precision, max_score double precision)
    RETURNS internal AS 'MODULE_PATHNAME', 'dp_argmax_trans' LANGUAGE C PARALLEL SAFE;
CREATE FUNCTION dp_argmax_final(state internal, item anyelement, score double precision, epsilon double precision, max_score double precision)
    RETURNS anyelement AS 'MODULE_PATHNAME', 'dp_argmax_final' LANGUAGE C PARALLEL SAFE;
CREATE AGGREGATE dp_argmax(item anyelement, score double precision, epsilon double precision, max_score double precision) (
    SFUNC = dp_argmax_trans, STYPE = internal, SSPACE = 4096,
    FINALFUNC = dp_argmax_final, FINALFUNC_EXTRA, FINALFUNC_MODIFY = READ_ONLY,
    COMBINEFUNC = dp_item_scores_combine,
    SERIALFUNC = dp_item_scores_serialize, DESERIALFUNC = dp_item_scores_deserialize,
    PARALLEL = SAFE);
COMMENT ON AGGREGATE dp_argmax(anyelement, double precision, double precision, double precision) IS
'Differentially private argmax: item i with probability proportional to exp(epsilon * S(i) / max_score), S(i) = sum of clamp(score, 0, max_score) over the rows of i. epsilon-DP for one row added or removed; the set of items that can win comes from the data (use the candidates form when items are private). NULL when no row. Answers are spelled canonically (numeric 1.00 as 1, float -0 as 0); item types that spell one value several ways otherwise (interval, jsonb, char(n), text under a nondeterministic collation) are refused: list the candidates, cast the items to text, or compare them under COLLATE "C". Items longer than 1 MiB (detoasted) are skipped as NULL items are, and left out of the candidates.';

CREATE FUNCTION dp_argmax_trans(state internal, item anyelement, score numeric, epsilon double precision, max_score double precision)
    RETURNS internal AS 'MODULE_PATHNAME', 'dp_argmax_trans' LANGUAGE C PARALLEL SAFE;
CREATE FUNCTION dp_argmax_final(state internal, item anyelement, score numeric, epsilon double precision, max_score double precision)
    RETURNS anyelement AS 'MODULE_PATHNAME', 'dp_argmax_final' LANGUAGE C PARALLEL SAFE;
CREATE AGGREGATE dp_argmax(item anyelement, score numeric, epsilon double precision, max_score double precision) (
    SFUNC = dp_argmax_trans, STYPE = internal, SSPACE = 4096,
    FINALFUNC = dp_argmax_final, FINALFUNC_EXTRA, FINALFUNC_MODIFY = READ_ONLY,
    COMBINEFUNC = dp_item_scores_combine,
    SERIALFUNC = dp_item_scores_serialize, DESERIALFUNC = dp_item_scores_deserialize,
    PARALLEL = SAFE);
COMMENT ON AGGREGATE dp_argmax(anyelement, numeric, double precision, double precision) IS
'Differentially private argmax: item i with probability proportional to exp(epsilon * S(i) / max_score), S(i) = sum of clamp(score, 0, max_score) over the rows of i. epsilon-DP for one row added or removed; the set of items that can win comes from the data (use the candidates form when items are private). NULL when no row. Answers are spelled canonically (numeric 1.00 as 1, float -0 as 0); item types that spell one value several ways otherwise (interval, jsonb, char(n), text under a nondeterministic collation) are refused: list the candidates, cast the items to text, or compare them under COLLATE "C". Items longer than 1 MiB (detoasted) are skipped as NULL items are, and left out of the candidates. A numeric score is converted to double precision without error (beyond its range it counts as +-Infinity, clamped).';

CREATE FUNCTION dp_argmax_trans(state internal, item anyelement, score double precision, epsilon double precision, max_score double precision, candidates anyarray)
    RETURNS internal AS 'MODULE_PATHNAME', 'dp_argmax_trans' LANGUAGE C PARALLEL SAFE;
CREATE FUNCTION dp_argmax_final(state internal, item anyelement, score double precision, epsilon double precision, max_score double precision, candidates anyarray)
    RETURNS anyelement AS 'MODULE_PATHNAME', 'dp_argmax_final' LANGUAGE C PARALLEL SAFE;
CREATE AGGREGATE dp_argmax(item anyelement, score double precision, epsilon double precision, max_score double precision, candidates anyarray) (
    SFUNC = dp_argmax_trans, STYPE = internal, SSPACE = 4096,
    FINALFUNC = dp_argmax_final, FINALFUNC_EXTRA, FINALFUNC_MODIFY = READ_ONLY,
    COMBINEFUNC = dp_item_scores_combine,
    SERIALFUNC = dp_item_scores_serialize, DESERIALFUNC = dp_item_scores_deserialize,
    PARALLEL = SAFE);
COMMENT ON AGGREGATE dp_argmax(anyelement, double precision, double precision, double precision, anyarray) IS
'Differentially private argmax over a public list of candidates: only listed items can win, listed items without rows score 0, rows of other items are ignored. epsilon-DP for one row added or removed, also when the items are private. With no row: a uniformly drawn candidate (not NULL, which would reveal the empty input). NULL for an empty list. Items longer than 1 MiB (detoasted) are skipped as NULL items are, and left out of the candidates.';

CREATE FUNCTION dp_argmax_trans(state internal, item anyelement, score numeric, epsilon double precision, max_score double precision, candidates anyarray)
    RETURNS internal AS 'MODULE_PATHNAME', 'dp_argmax_trans' LANGUAGE C PARALLEL SAFE;
CREATE FUNCTION dp_argmax_final(state internal, item anyelement, score numeric, epsilon double precision, max_score double precision, candidates anyarray)
    RETURNS anyelement AS 'MODULE_PATHNAME', 'dp_argmax_final' LANGUAGE C PARALLEL SAFE;
CREATE AGGREGATE dp_argmax(item anyelement, score numeric, epsilon double precision, max_score double precision, candidates anyarray) (
    SFUNC = dp_argmax_trans, STYPE = internal, SSPACE = 4096,
    FINALFUNC = dp_argmax_final, FINALFUNC_EXTRA, FINALFUNC_MODIFY = READ_ONLY,
    COMBINEFUNC = dp_item_scores_combine,
    SERIALFUNC = dp_item_scores_serialize, DESERIALFUNC = dp_item_scores_deserialize,
    PARALLEL = SAFE);
COMMENT ON AGGREGATE dp_argmax(anyelement, numeric, double precision, double precision, anyarray) IS
'Differentially private argmax over a public list of candidates: only listed items can win, listed items without rows score 0, rows of other items are ignored. epsilon-DP for one row added or removed, also when the items are private. With no row: a uniformly drawn candidate (not NULL, which would reveal the empty input). NULL for an empty list. Items longer than 1 MiB (detoasted) are skipped as NULL items are, and left out of the candidates. A numeric score is converted to double precision without error (beyond its range it counts as +-Infinity, clamped).';

CREATE FUNCTION dp_top_k_trans(state internal, item anyelement, score double precision, k integer, epsilon double precision)
    RETURNS internal AS 'MODULE_PATHNAME', 'dp_top_k_trans' LANGUAGE C PARALLEL SAFE;
CREATE FUNCTION dp_top_k_final(state internal, item anyelement, score double precision, k integer, epsilon double precision)
    RETURNS anyarray AS 'MODULE_PATHNAME', 'dp_top_k_final' LANGUAGE C PARALLEL SAFE;
CREATE AGGREGATE dp_top_k(item anyelement, score double precision, k integer, epsilon double precision) (
    SFUNC = dp_top_k_trans, STYPE = internal, SSPACE = 4096,
    FINALFUNC = dp_top_k_final, FINALFUNC_EXTRA, FINALFUNC_MODIFY = READ_ONLY,
    COMBINEFUNC = dp_item_scores_combine,
    SERIALFUNC = dp_item_scores_serialize, DESERIALFUNC = dp_item_scores_deserialize,
    PARALLEL = SAFE);
COMMENT ON AGGREGATE dp_top_k(anyelement, double precision, integer, double precision) IS
'Differentially private top k by count: the k items with the largest count(i) + Gumbel noise at temperature k/epsilon, best first (one-shot top-k, equal in distribution to k exponential mechanisms at epsilon/k each). The whole list is epsilon-DP for one row added or removed; the items come from the data (use the candidates form when items are private). NULL when no row. Answers are spelled canonically (numeric 1.00 as 1, float -0 as 0); item types that spell one value several ways otherwise (interval, jsonb, char(n), text under a nondeterministic collation) are refused: list the candidates, cast the items to text, or compare them under COLLATE "C". Items longer than 1 MiB (detoasted) are skipped as NULL items are, and left out of the candidates.';

CREATE FUNCTION dp_top_k_trans(state internal, item anyelement, score numeric, k integer, epsilon double precision)
    RETURNS internal AS 'MODULE_PATHNAME', 'dp_top_k_trans' LANGUAGE C PARALLEL SAFE;
CREATE FUNCTION dp_top_k_final(state internal, item anyelement, score numeric, k integer, epsilon double precision)
    RETURNS anyarray AS 'MODULE_PATHNAME', 'dp_top_k_final' LANGUAGE C PARALLEL SAFE;
CREATE AGGREGATE dp_top_k(item anyelement, score numeric, k integer, epsilon double precision) (
    SFUNC = dp_top_k_trans, STYPE = internal, SSPACE = 4096,
    FINALFUNC = dp_top_k_final, FINALFUNC_EXTRA, FINALFUNC_MODIFY = READ_ONLY,
    COMBINEFUNC = dp_item_scores_combine,
    SERIALFUNC = dp_item_scores_serialize, DESERIALFUNC = dp_item_scores_deserialize,
    PARALLEL = SAFE);
COMMENT ON AGGREGATE dp_top_k(anyelement, numeric, integer, double precision) IS
'Differentially private top k by count: the k items with the largest count(i) + Gumbel noise at temperature k/epsilon, best first (one-shot top-k, equal in distribution to k exponential mechanisms at epsilon/k each). The whole list is epsilon-DP for one row added or removed; the items come from the data (use the candidates form when items are private). NULL when no row. Answers are spelled canonically (numeric 1.00 as 1, float -0 as 0); item types that spell one value several ways otherwise (interval, jsonb, char(n), text under a nondeterministic collation) are refused: list the candidates, cast the items to text, or compare them under COLLATE "C". Items longer than 1 MiB (detoasted) are skipped as NULL items are, and left out of the candidates. A numeric score is converted to double precision without error (beyond its range it counts as +-Infinity, clamped).';

CREATE FUNCTION dp_top_k_trans(state internal, item anyelement, score double precision, k integer, epsilon double precision, max_score double precision)
    RETURNS internal AS 'MODULE_PATHNAME', 'dp_top_k_trans' LANGUAGE C PARALLEL SAFE;
CREATE FUNCTION dp_top_k_final(state internal, item anyelement, score double precision, k integer, epsilon double precision, max_score double precision)
    RETURNS anyarray AS 'MODULE_PATHNAME', 'dp_top_k_final' LANGUAGE C PARALLEL SAFE;
CREATE AGGREGATE dp_top_k(item anyelement, score double precision, k integer, epsilon double precision, max_score double precision) (
    SFUNC = dp_top_k_trans, STYPE = internal, SSPACE = 4096,
    FINALFUNC = dp_top_k_final, FINALFUNC_EXTRA, FINALFUNC_MODIFY = READ_ONLY,
    COMBINEFUNC = dp_item_scores_combine,
    SERIALFUNC = dp_item_scores_serialize, DESERIALFUNC = dp_item_scores_deserialize,
    PARALLEL = SAFE);
COMMENT ON AGGREGATE dp_top_k(anyelement, double precision, integer, double precision, double precision) IS
'Differentially private top k: scores S(i) = sum of clamp(score, 0, max_score), Gumbel noise at temperature k*max_score/epsilon added once, the k best returned best first. The whole list is epsilon-DP for one row added or removed; the items come from the data (use the candidates form when items are private). NULL when no row. Answers are spelled canonically (numeric 1.00 as 1, float -0 as 0); item types that spell one value several ways otherwise (interval, jsonb, char(n), text under a nondeterministic collation) are refused: list the candidates, cast the items to text, or compare them under COLLATE "C". Items longer than 1 MiB (detoasted) are skipped as NULL items are, and left out of the candidates.';

CREATE FUNCTION dp_top_k_trans(state internal, item anyelement, score numeric, k integer, epsilon double precision, max_score double precision)
    RETURNS internal AS 'MODULE_PATHNAME', 'dp_top_k_trans' LANGUAGE C PARALLEL SAFE;
CREATE FUNCTION dp_top_k_final(state internal, item anyelement, score numeric, k integer, epsilon double precision, max_score double precision)
    RETURNS anyarray AS 'MODULE_PATHNAME', 'dp_top_k_final' LANGUAGE C PARALLEL SAFE;
CREATE AGGREGATE dp_top_k(item anyelement, score numeric, k integer, epsilon double precision, max_score double precision) (
    SFUNC = dp_top_k_trans, STYPE = internal, SSPACE = 4096,
    FINALFUNC = dp_top_k_final, FINALFUNC_EXTRA, FINALFUNC_MODIFY = READ_ONLY,
    COMBINEFUNC = dp_item_scores_combine,
    SERIALFUNC = dp_item_scores_serialize, DESERIALFUNC = dp_item_scores_deserialize,
    PARALLEL = SAFE);
COMMENT ON AGGREGATE dp_top_k(anyelement, numeric, integer, double precision, double precision) IS
'Differentially private top k: scores S(i) = sum of clamp(score, 0, max_score), Gumbel noise at temperature k*max_score/epsilon added once, the k best returned best first. The whole list is epsilon-DP for one row added or removed; the items come from the data (use the candidates form when items are private). NULL when no row. Answers are spelled canonically (numeric 1.00 as 1, float -0 as 0); item types that spell one value several ways otherwise (interval, jsonb, char(n), text under a nondeterministic collation) are refused: list the candidates, cast the items to text, or compare them under COLLATE "C". Items longer than 1 MiB (detoasted) are skipped as NULL items are, and left out of the candidates. A numeric score is converted to double precision without error (beyond its range it counts as +-Infinity, clamped).';

CREATE FUNCTION dp_top_k_trans(state internal, item anyelement, score double precision, k integer, epsilon double precision, max_score double precision, candidates anyarray)
    RETURNS internal AS 'MODULE_PATHNAME', 'dp_top_k_trans' LANGUAGE C PARALLEL SAFE;
CREATE FUNCTION dp_top_k_final(state internal, item anyelement, score double precision, k integer, epsilon double precision, max_score double precision, candidates anyarray)
    RETURNS anyarray AS 'MODULE_PATHNAME', 'dp_top_k_final' LANGUAGE C PARALLEL SAFE;
CREATE AGGREGATE dp_top_k(item anyelement, score double precision, k integer, epsilon double precision, max_score double precision, candidates anyarray) (
    SFUNC = dp_top_k_trans, STYPE = internal, SSPACE = 4096,
    FINALFUNC = dp_top_k_final, FINALFUNC_EXTRA, FINALFUNC_MODIFY = READ_ONLY,
    COMBINEFUNC = dp_item_scores_combine,
    SERIALFUNC = dp_item_scores_serialize, DESERIALFUNC = dp_item_scores_deserialize,
    PARALLEL = SAFE);
COMMENT ON AGGREGATE dp_top_k(anyelement, double precision, integer, double precision, double precision, anyarray) IS
'Differentially private top k over a public list of candidates (listed items without rows score 0, other items are ignored). The whole list is epsilon-DP for one row added or removed, also when the items are private. With no row: k candidates in uniformly random order. NULL for an empty list. Items longer than 1 MiB (detoasted) are skipped as NULL items are, and left out of the candidates.';

CREATE FUNCTION dp_top_k_trans(state internal, item anyelement, score numeric, k integer, epsilon double precision, max_score double precision, candidates anyarray)
    RETURNS internal AS 'MODULE_PATHNAME', 'dp_top_k_trans' LANGUAGE C PARALLEL SAFE;
CREATE FUNCTION dp_top_k_final(state internal, item anyelement, score numeric, k integer, epsilon double precision, max_score double precision, candidates anyarray)
    RETURNS anyarray AS 'MODULE_PATHNAME', 'dp_top_k_final' LANGUAGE C PARALLEL SAFE;
CREATE AGGREGATE dp_top_k(item anyelement, score numeric, k integer, epsilon double precision, max_score double precision, candidates anyarray) (
    SFUNC = dp_top_k_trans, STYPE = internal, SSPACE = 4096,
    FINALFUNC = dp_top_k_final, FINALFUNC_EXTRA, FINALFUNC_MODIFY = READ_ONLY,
    COMBINEFUNC = dp_item_scores_combine,
    SERIALFUNC = dp_item_scores_serialize, DESERIALFUNC = dp_item_scores_deserialize,
    PARALLEL = SAFE);
COMMENT ON AGGREGATE dp_top_k(anyelement, numeric, integer, double precision, double precision, anyarray) IS
'Differentially private top k over a public list of candidates (listed items without rows score 0, other items are ignored). The whole list is epsilon-DP for one row added or removed, also when the items are private. With no row: k candidates in uniformly random order. NULL for an empty list. Items longer than 1 MiB (detoasted) are skipped as NULL items are, and left out of the candidates. A numeric score is converted to double precision without error (beyond its range it counts as +-Infinity, clamped).';

CREATE FUNCTION dp_top_k_unknown_domain_trans(state internal, item anyelement, score double precision, k integer, epsilon double precision, delta double precision)
    RETURNS internal AS 'MODULE_PATHNAME', 'dp_top_k_unknown_domain_trans' LANGUAGE C PARALLEL SAFE;
CREATE FUNCTION dp_top_k_unknown_domain_final(state internal, item anyelement, score double precision, k integer, epsilon double precision, delta double precision)
    RETURNS anyarray AS 'MODULE_PATHNAME', 'dp_top_k_unknown_domain_final' LANGUAGE C PARALLEL SAFE;
CREATE AGGREGATE dp_top_k_unknown_domain(item anyelement, score double precision, k integer, epsilon double precision, delta double precision) (
    SFUNC = dp_top_k_unknown_domain_trans, STYPE = internal, SSPACE = 4096,
    FINALFUNC = dp_top_k_unknown_domain_final, FINALFUNC_EXTRA, FINALFUNC_MODIFY = READ_ONLY,
    COMBINEFUNC = dp_item_scores_combine,
    SERIALFUNC = dp_item_scores_serialize, DESERIALFUNC = dp_item_scores_deserialize,
    PARALLEL = SAFE);
COMMENT ON AGGREGATE dp_top_k_unknown_domain(anyelement, double precision, integer, double precision, double precision) IS
'(epsilon, delta)-DP top k by count when the items themselves are private (limited-domain mechanism of Durfee and Rogers 2019): the true top k compete with a threshold above the (k+1)-th count; items come out in noisy order until k are out or the threshold comes first. An item with a single row is returned with probability below delta. Answers are spelled canonically (numeric 1.00 as 1, float -0 as 0); item types that spell one value several ways otherwise (interval, jsonb, char(n), text under a nondeterministic collation) are refused: list the candidates, cast the items to text, or compare them under COLLATE "C". Items longer than 1 MiB (detoasted) are skipped as NULL items are, and left out of the candidates.';

CREATE FUNCTION dp_top_k_unknown_domain_trans(state internal, item anyelement, score numeric, k integer, epsilon double precision, delta double precision)
    RETURNS internal AS 'MODULE_PATHNAME', 'dp_top_k_unknown_domain_trans' LANGUAGE C PARALLEL SAFE;
CREATE FUNCTION dp_top_k_unknown_domain_final(state internal, item anyelement, score numeric, k integer, epsilon double precision, delta double precision)
    RETURNS anyarray AS 'MODULE_PATHNAME', 'dp_top_k_unknown_domain_final' LANGUAGE C PARALLEL SAFE;
CREATE AGGREGATE dp_top_k_unknown_domain(item anyelement, score numeric, k integer, epsilon double precision, delta double precision) (
    SFUNC = dp_top_k_unknown_domain_trans, STYPE = internal, SSPACE = 4096,
    FINALFUNC = dp_top_k_unknown_domain_final, FINALFUNC_EXTRA, FINALFUNC_MODIFY = READ_ONLY,
    COMBINEFUNC = dp_item_scores_combine,
    SERIALFUNC = dp_item_scores_serialize, DESERIALFUNC = dp_item_scores_deserialize,
    PARALLEL = SAFE);
COMMENT ON AGGREGATE dp_top_k_unknown_domain(anyelement, numeric, integer, double precision, double precision) IS
'(epsilon, delta)-DP top k by count when the items themselves are private (limited-domain mechanism of Durfee and Rogers 2019): the true top k compete with a threshold above the (k+1)-th count; items come out in noisy order until k are out or the threshold comes first. An item with a single row is returned with probability below delta. Answers are spelled canonically (numeric 1.00 as 1, float -0 as 0); item types that spell one value several ways otherwise (interval, jsonb, char(n), text under a nondeterministic collation) are refused: list the candidates, cast the items to text, or compare them under COLLATE "C". Items longer than 1 MiB (detoasted) are skipped as NULL items are, and left out of the candidates. A numeric score is converted to double precision without error (beyond its range it counts as +-Infinity, clamped).';

CREATE FUNCTION dp_top_k_unknown_domain_trans(state internal, item anyelement, score double precision, k integer, epsilon double precision, delta double precision, max_score double precision)
    RETURNS internal AS 'MODULE_PATHNAME', 'dp_top_k_unknown_domain_trans' LANGUAGE C PARALLEL SAFE;
CREATE FUNCTION dp_top_k_unknown_domain_final(state internal, item anyelement, score double precision, k integer, epsilon double precision, delta double precision, max_score double precision)
    RETURNS anyarray AS 'MODULE_PATHNAME', 'dp_top_k_unknown_domain_final' LANGUAGE C PARALLEL SAFE;
CREATE AGGREGATE dp_top_k_unknown_domain(item anyelement, score double precision, k integer, epsilon double precision, delta double precision, max_score double precision) (
    SFUNC = dp_top_k_unknown_domain_trans, STYPE = internal, SSPACE = 4096,
    FINALFUNC = dp_top_k_unknown_domain_final, FINALFUNC_EXTRA, FINALFUNC_MODIFY = READ_ONLY,
    COMBINEFUNC = dp_item_scores_combine,
    SERIALFUNC = dp_item_scores_serialize, DESERIALFUNC = dp_item_scores_deserialize,
    PARALLEL = SAFE);
COMMENT ON AGGREGATE dp_top_k_unknown_domain(anyelement, double precision, integer, double precision, double precision, double precision) IS
'(epsilon, delta)-DP top k of S(i) = sum of clamp(score, 0, max_score) when the items themselves are private (limited-domain mechanism of Durfee and Rogers 2019, k_bar = k). Answers are spelled canonically (numeric 1.00 as 1, float -0 as 0); item types that spell one value several ways otherwise (interval, jsonb, char(n), text under a nondeterministic collation) are refused: list the candidates, cast the items to text, or compare them under COLLATE "C". Items longer than 1 MiB (detoasted) are skipped as NULL items are, and left out of the candidates.';

CREATE FUNCTION dp_top_k_unknown_domain_trans(state internal, item anyelement, score numeric, k integer, epsilon double precision, delta double precision, max_score double precision)
    RETURNS internal AS 'MODULE_PATHNAME', 'dp_top_k_unknown_domain_trans' LANGUAGE C PARALLEL SAFE;
CREATE FUNCTION dp_top_k_unknown_domain_final(state internal, item anyelement, score numeric, k integer, epsilon double precision, delta double precision, max_score double precision)
    RETURNS anyarray AS 'MODULE_PATHNAME', 'dp_top_k_unknown_domain_final' LANGUAGE C PARALLEL SAFE;
CREATE AGGREGATE dp_top_k_unknown_domain(item anyelement, score numeric, k integer, epsilon double precision, delta double precision, max_score double precision) (
    SFUNC = dp_top_k_unknown_domain_trans, STYPE = internal, SSPACE = 4096,
    FINALFUNC = dp_top_k_unknown_domain_final, FINALFUNC_EXTRA, FINALFUNC_MODIFY = READ_ONLY,
    COMBINEFUNC = dp_item_scores_combine,
    SERIALFUNC = dp_item_scores_serialize, DESERIALFUNC = dp_item_scores_deserialize,
    PARALLEL = SAFE);
COMMENT ON AGGREGATE dp_top_k_unknown_domain(anyelement, numeric, integer, double precision, double precision, double precision) IS
'(epsilon, delta)-DP top k of S(i) = sum of clamp(score, 0, max_score) when the items themselves are private (limited-domain mechanism of Durfee and Rogers 2019, k_bar = k). Answers are spelled canonically (numeric 1.00 as 1, float -0 as 0); item types that spell one value several ways otherwise (interval, jsonb, char(n), text under a nondeterministic collation) are refused: list the candidates, cast the items to text, or compare them under COLLATE "C". Items longer than 1 MiB (detoasted) are skipped as NULL items are, and left out of the candidates. A numeric score is converted to double precision without error (beyond its range it counts as +-Infinity, clamped).';

CREATE FUNCTION dp_top_k_unknown_domain_trans(state internal, item anyelement, score double precision, k integer, epsilon double precision, delta double precision, max_score double precision, k_bar integer)
    RETURNS internal AS 'MODULE_PATHNAME', 'dp_top_k_unknown_domain_trans' LANGUAGE C PARALLEL SAFE;
CREATE FUNCTION dp_top_k_unknown_domain_final(state internal, item anyelement, score double precision, k integer, epsilon double precision, delta double precision, max_score double precision, k_bar integer)
    RETURNS anyarray AS 'MODULE_PATHNAME', 'dp_top_k_unknown_domain_final' LANGUAGE C PARALLEL SAFE;
CREATE AGGREGATE dp_top_k_unknown_domain(item anyelement, score double precision, k integer, epsilon double precision, delta double precision, max_score double precision, k_bar integer) (
    SFUNC = dp_top_k_unknown_domain_trans, STYPE = internal, SSPACE = 4096,
    FINALFUNC = dp_top_k_unknown_domain_final, FINALFUNC_EXTRA, FINALFUNC_MODIFY = READ_ONLY,
    COMBINEFUNC = dp_item_scores_combine,
    SERIALFUNC = dp_item_scores_serialize, DESERIALFUNC = dp_item_scores_deserialize,
    PARALLEL = SAFE);
COMMENT ON AGGREGATE dp_top_k_unknown_domain(anyelement, double precision, integer, double precision, double precision, double precision, integer) IS
'(epsilon, delta)-DP top k of S(i) = sum of clamp(score, 0, max_score) when the items themselves are private; the top k_bar items (k_bar >= k) compete with a threshold above the (k_bar+1)-th score (limited-domain mechanism of Durfee and Rogers 2019). Answers are spelled canonically (numeric 1.00 as 1, float -0 as 0); item types that spell one value several ways otherwise (interval, jsonb, char(n), text under a nondeterministic collation) are refused: list the candidates, cast the items to text, or compare them under COLLATE "C". Items longer than 1 MiB (detoasted) are skipped as NULL items are, and left out of the candidates.';

CREATE FUNCTION dp_top_k_unknown_domain_trans(state internal, item anyelement, score numeric, k integer, epsilon double precision, delta double precision, max_score double precision, k_bar integer)
    RETURNS internal AS 'MODULE_PATHNAME', 'dp_top_k_unknown_domain_trans' LANGUAGE C PARALLEL SAFE;
CREATE FUNCTION dp_top_k_unknown_domain_final(state internal, item anyelement, score numeric, k integer, epsilon double precision, delta double precision, max_score double precision, k_bar integer)
    RETURNS anyarray AS 'MODULE_PATHNAME', 'dp_top_k_unknown_domain_final' LANGUAGE C PARALLEL SAFE;
CREATE AGGREGATE dp_top_k_unknown_domain(item anyelement, score numeric, k integer, epsilon double precision, delta double precision, max_score double precision, k_bar integer) (
    SFUNC = dp_top_k_unknown_domain_trans, STYPE = internal, SSPACE = 4096,
    FINALFUNC = dp_top_k_unknown_domain_final, FINALFUNC_EXTRA, FINALFUNC_MODIFY = READ_ONLY,
    COMBINEFUNC = dp_item_scores_combine,
    SERIALFUNC = dp_item_scores_serialize, DESERIALFUNC = dp_item_scores_deserialize,
    PARALLEL = SAFE);
COMMENT ON AGGREGATE dp_top_k_unknown_domain(anyelement, numeric, integer, double precision, double precision, double precision, integer) IS
'(epsilon, delta)-DP top k of S(i) = sum of clamp(score, 0, max_score) when the items themselves are private; the top k_bar items (k_bar >= k) compete with a threshold above the (k_bar+1)-th score (limited-domain mechanism of Durfee and Rogers 2019). Answers are spelled canonically (numeric 1.00 as 1, float -0 as 0); item types that spell one value several ways otherwise (interval, jsonb, char(n), text under a nondeterministic collation) are refused: list the candidates, cast the items to text, or compare them under COLLATE "C". Items longer than 1 MiB (detoasted) are skipped as NULL items are, and left out of the candidates. A numeric score is converted to double precision without error (beyond its range it counts as +-Infinity, clamped).';

CREATE FUNCTION dp_quantile_trans(state internal, value double precision, alpha double precision, lo double precision, hi double precision, epsilon double precision)
    RETURNS internal AS 'MODULE_PATHNAME', 'dp_quantile_trans' LANGUAGE C PARALLEL SAFE;
CREATE AGGREGATE dp_quantile(value double precision, alpha double precision, lo double precision, hi double precision, epsilon double precision) (
    SFUNC = dp_quantile_trans, STYPE = internal, SSPACE = 1024,
    FINALFUNC = dp_quantile_final, FINALFUNC_MODIFY = READ_ONLY,
    COMBINEFUNC = dp_quantile_combine,
    SERIALFUNC = dp_quantile_serialize, DESERIALFUNC = dp_quantile_deserialize,
    PARALLEL = SAFE);
COMMENT ON AGGREGATE dp_quantile(double precision, double precision, double precision, double precision, double precision) IS
'Differentially private alpha-quantile of value on the public grid lo + j*(hi - lo)/K (K = pg_exp_mech.quantile_grid_size, 2^20 by default): grid point c with probability proportional to exp(epsilon * u(c) / (2*max(alpha, 1 - alpha))), u(c) = -|(1 - alpha)*#{x < c} - alpha*#{x > c}|. Values are clamped to [lo, hi] and counted exactly (#{x < c} and #{x > c} as the values lie, at a grid point or strictly between two); NULL and NaN are skipped. epsilon-DP for one row added or removed. No row: a uniform grid point.';

CREATE FUNCTION dp_quantiles_trans(state internal, value double precision, alphas double precision[], lo double precision, hi double precision, epsilon double precision)
    RETURNS internal AS 'MODULE_PATHNAME', 'dp_quantiles_trans' LANGUAGE C PARALLEL SAFE;
CREATE AGGREGATE dp_quantiles(value double precision, alphas double precision[], lo double precision, hi double precision, epsilon double precision) (
    SFUNC = dp_quantiles_trans, STYPE = internal, SSPACE = 1024,
    FINALFUNC = dp_quantiles_final, FINALFUNC_MODIFY = READ_ONLY,
    COMBINEFUNC = dp_quantile_combine,
    SERIALFUNC = dp_quantile_serialize, DESERIALFUNC = dp_quantile_deserialize,
    PARALLEL = SAFE);
COMMENT ON AGGREGATE dp_quantiles(double precision, double precision[], double precision, double precision, double precision) IS
'Several differentially private quantiles from one scan, epsilon-DP in total, returned in the order of alphas and non-decreasing where the alphas are. By default (pg_exp_mech.quantiles_method = recursive) by recursive splitting (Kaplan, Schnapp and Stemmer 2022): the middle alpha on all values, then each side on its own values, epsilon/ceil(log2(m + 1)) per level; with quantiles_method = split, dp_quantile for each alpha at epsilon/m.';

CREATE FUNCTION dp_quantile_smallint_trans(state internal, value smallint, alpha double precision, lo bigint, hi bigint, epsilon double precision)
    RETURNS internal AS 'MODULE_PATHNAME', 'dp_quantile_smallint_trans' LANGUAGE C PARALLEL SAFE;
CREATE AGGREGATE dp_quantile(value smallint, alpha double precision, lo bigint, hi bigint, epsilon double precision) (
    SFUNC = dp_quantile_smallint_trans, STYPE = internal, SSPACE = 1024,
    FINALFUNC = dp_quantile_smallint_final, FINALFUNC_MODIFY = READ_ONLY,
    COMBINEFUNC = dp_quantile_combine,
    SERIALFUNC = dp_quantile_serialize, DESERIALFUNC = dp_quantile_deserialize,
    PARALLEL = SAFE);
COMMENT ON AGGREGATE dp_quantile(smallint, double precision, bigint, bigint, double precision) IS
'Differentially private alpha-quantile of an integer column, in the column''s type: a whole-number grid point c of lo, lo + step, ..., hi (step 1 when hi - lo <= K = pg_exp_mech.quantile_grid_size, otherwise step ceil((hi - lo)/K), at most K steps; the last step may be shorter), drawn with probability proportional to exp(epsilon * u(c) / (2*max(alpha, 1 - alpha))), u(c) = -|(1 - alpha)*#{x < c} - alpha*#{x > c}|, counted exactly. Values are clamped to [lo, hi]; NULL is skipped. epsilon-DP for one row added or removed. No row: a uniform grid point.';

CREATE FUNCTION dp_quantiles_smallint_trans(state internal, value smallint, alphas double precision[], lo bigint, hi bigint, epsilon double precision)
    RETURNS internal AS 'MODULE_PATHNAME', 'dp_quantiles_smallint_trans' LANGUAGE C PARALLEL SAFE;
CREATE AGGREGATE dp_quantiles(value smallint, alphas double precision[], lo bigint, hi bigint, epsilon double precision) (
    SFUNC = dp_quantiles_smallint_trans, STYPE = internal, SSPACE = 1024,
    FINALFUNC = dp_quantiles_smallint_final, FINALFUNC_MODIFY = READ_ONLY,
    COMBINEFUNC = dp_quantile_combine,
    SERIALFUNC = dp_quantile_serialize, DESERIALFUNC = dp_quantile_deserialize,
    PARALLEL = SAFE);
COMMENT ON AGGREGATE dp_quantiles(smallint, double precision[], bigint, bigint, double precision) IS
'Several differentially private quantiles of an integer column from one scan, in the column''s type, on the whole-number grid of dp_quantile over integers: epsilon-DP in total, returned in the order of alphas and non-decreasing where the alphas are (recursive splitting by default, or epsilon/m each with pg_exp_mech.quantiles_method = split).';

CREATE FUNCTION dp_quantile_integer_trans(state internal, value integer, alpha double precision, lo bigint, hi bigint, epsilon double precision)
    RETURNS internal AS 'MODULE_PATHNAME', 'dp_quantile_integer_trans' LANGUAGE C PARALLEL SAFE;
CREATE AGGREGATE dp_quantile(value integer, alpha double precision, lo bigint, hi bigint, epsilon double precision) (
    SFUNC = dp_quantile_integer_trans, STYPE = internal, SSPACE = 1024,
    FINALFUNC = dp_quantile_integer_final, FINALFUNC_MODIFY = READ_ONLY,
    COMBINEFUNC = dp_quantile_combine,
    SERIALFUNC = dp_quantile_serialize, DESERIALFUNC = dp_quantile_deserialize,
    PARALLEL = SAFE);
COMMENT ON AGGREGATE dp_quantile(integer, double precision, bigint, bigint, double precision) IS
'Differentially private alpha-quantile of an integer column, in the column''s type: a whole-number grid point c of lo, lo + step, ..., hi (step 1 when hi - lo <= K = pg_exp_mech.quantile_grid_size, otherwise step ceil((hi - lo)/K), at most K steps; the last step may be shorter), drawn with probability proportional to exp(epsilon * u(c) / (2*max(alpha, 1 - alpha))), u(c) = -|(1 - alpha)*#{x < c} - alpha*#{x > c}|, counted exactly. Values are clamped to [lo, hi]; NULL is skipped. epsilon-DP for one row added or removed. No row: a uniform grid point.';

CREATE FUNCTION dp_quantiles_integer_trans(state internal, value integer, alphas double precision[], lo bigint, hi bigint, epsilon double precision)
    RETURNS internal AS 'MODULE_PATHNAME', 'dp_quantiles_integer_trans' LANGUAGE C PARALLEL SAFE;
CREATE AGGREGATE dp_quantiles(value integer, alphas double precision[], lo bigint, hi bigint, epsilon double precision) (
    SFUNC = dp_quantiles_integer_trans, STYPE = internal, SSPACE = 1024,
    FINALFUNC = dp_quantiles_integer_final, FINALFUNC_MODIFY = READ_ONLY,
    COMBINEFUNC = dp_quantile_combine,
    SERIALFUNC = dp_quantile_serialize, DESERIALFUNC = dp_quantile_deserialize,
    PARALLEL = SAFE);
COMMENT ON AGGREGATE dp_quantiles(integer, double precision[], bigint, bigint, double precision) IS
'Several differentially private quantiles of an integer column from one scan, in the column''s type, on the whole-number grid of dp_quantile over integers: epsilon-DP in total, returned in the order of alphas and non-decreasing where the alphas are (recursive splitting by default, or epsilon/m each with pg_exp_mech.quantiles_method = split).';

CREATE FUNCTION dp_quantile_bigint_trans(state internal, value bigint, alpha double precision, lo bigint, hi bigint, epsilon double precision)
    RETURNS internal AS 'MODULE_PATHNAME', 'dp_quantile_bigint_trans' LANGUAGE C PARALLEL SAFE;
CREATE AGGREGATE dp_quantile(value bigint, alpha double precision, lo bigint, hi bigint, epsilon double precision) (
    SFUNC = dp_quantile_bigint_trans, STYPE = internal, SSPACE = 1024,
    FINALFUNC = dp_quantile_bigint_final, FINALFUNC_MODIFY = READ_ONLY,
    COMBINEFUNC = dp_quantile_combine,
    SERIALFUNC = dp_quantile_serialize, DESERIALFUNC = dp_quantile_deserialize,
    PARALLEL = SAFE);
COMMENT ON AGGREGATE dp_quantile(bigint, double precision, bigint, bigint, double precision) IS
'Differentially private alpha-quantile of an integer column, in the column''s type: a whole-number grid point c of lo, lo + step, ..., hi (step 1 when hi - lo <= K = pg_exp_mech.quantile_grid_size, otherwise step ceil((hi - lo)/K), at most K steps; the last step may be shorter), drawn with probability proportional to exp(epsilon * u(c) / (2*max(alpha, 1 - alpha))), u(c) = -|(1 - alpha)*#{x < c} - alpha*#{x > c}|, counted exactly. Values are clamped to [lo, hi]; NULL is skipped. epsilon-DP for one row added or removed. No row: a uniform grid point.';

CREATE FUNCTION dp_quantiles_bigint_trans(state internal, value bigint, alphas double precision[], lo bigint, hi bigint, epsilon double precision)
    RETURNS internal AS 'MODULE_PATHNAME', 'dp_quantiles_bigint_trans' LANGUAGE C PARALLEL SAFE;
CREATE AGGREGATE dp_quantiles(value bigint, alphas double precision[], lo bigint, hi bigint, epsilon double precision) (
    SFUNC = dp_quantiles_bigint_trans, STYPE = internal, SSPACE = 1024,
    FINALFUNC = dp_quantiles_bigint_final, FINALFUNC_MODIFY = READ_ONLY,
    COMBINEFUNC = dp_quantile_combine,
    SERIALFUNC = dp_quantile_serialize, DESERIALFUNC = dp_quantile_deserialize,
    PARALLEL = SAFE);
COMMENT ON AGGREGATE dp_quantiles(bigint, double precision[], bigint, bigint, double precision) IS
'Several differentially private quantiles of an integer column from one scan, in the column''s type, on the whole-number grid of dp_quantile over integers: epsilon-DP in total, returned in the order of alphas and non-decreasing where the alphas are (recursive splitting by default, or epsilon/m each with pg_exp_mech.quantiles_method = split).';

CREATE FUNCTION dp_quantile_numeric_trans(state internal, value numeric, alpha double precision, lo double precision, hi double precision, epsilon double precision)
    RETURNS internal AS 'MODULE_PATHNAME', 'dp_quantile_numeric_trans' LANGUAGE C PARALLEL SAFE;
CREATE AGGREGATE dp_quantile(value numeric, alpha double precision, lo double precision, hi double precision, epsilon double precision) (
    SFUNC = dp_quantile_numeric_trans, STYPE = internal, SSPACE = 1024,
    FINALFUNC = dp_quantile_numeric_final, FINALFUNC_MODIFY = READ_ONLY,
    COMBINEFUNC = dp_quantile_combine,
    SERIALFUNC = dp_quantile_serialize, DESERIALFUNC = dp_quantile_deserialize,
    PARALLEL = SAFE);
COMMENT ON AGGREGATE dp_quantile(numeric, double precision, double precision, double precision, double precision) IS
'Differentially private alpha-quantile of a numeric column, in numeric: dp_quantile over double precision on the same grid lo + j*(hi - lo)/K (K = pg_exp_mech.quantile_grid_size), each value converted to double precision without error (beyond its range a value clamps like +-Infinity, a nonzero value below it counts as 0) and the answer, a grid point, converted to numeric by PostgreSQL''s own cast (15 significant digits). Values are clamped to [lo, hi]; NULL and NaN are skipped. epsilon-DP for one row added or removed. No row: a uniform grid point.';

CREATE FUNCTION dp_quantiles_numeric_trans(state internal, value numeric, alphas double precision[], lo double precision, hi double precision, epsilon double precision)
    RETURNS internal AS 'MODULE_PATHNAME', 'dp_quantiles_numeric_trans' LANGUAGE C PARALLEL SAFE;
CREATE AGGREGATE dp_quantiles(value numeric, alphas double precision[], lo double precision, hi double precision, epsilon double precision) (
    SFUNC = dp_quantiles_numeric_trans, STYPE = internal, SSPACE = 1024,
    FINALFUNC = dp_quantiles_numeric_final, FINALFUNC_MODIFY = READ_ONLY,
    COMBINEFUNC = dp_quantile_combine,
    SERIALFUNC = dp_quantile_serialize, DESERIALFUNC = dp_quantile_deserialize,
    PARALLEL = SAFE);
COMMENT ON AGGREGATE dp_quantiles(numeric, double precision[], double precision, double precision, double precision) IS
'Several differentially private quantiles of a numeric column from one scan, in numeric, on the grid of dp_quantile over numeric: epsilon-DP in total, returned in the order of alphas and non-decreasing where the alphas are (recursive splitting by default, or epsilon/m each with pg_exp_mech.quantiles_method = split).';

CREATE FUNCTION dp_partition_final(state bigint, epsilon double precision, delta double precision)
    RETURNS boolean AS 'MODULE_PATHNAME', 'dp_partition_final' LANGUAGE C PARALLEL SAFE;
CREATE AGGREGATE dp_partition(epsilon double precision, delta double precision) (
    SFUNC = pg_catalog.int8inc_float8_float8, STYPE = bigint, INITCOND = '0',
    FINALFUNC = dp_partition_final, FINALFUNC_EXTRA,
    COMBINEFUNC = pg_catalog.int8pl, PARALLEL = SAFE);
COMMENT ON AGGREGATE dp_partition(double precision, double precision) IS
'Differentially private partition selection, for HAVING: true for a group of n rows with the optimal probability of Desfontaines, Voss, Gipson and Mandayam (PETS 2022), pi(0) = 0, pi(n) = min(exp(epsilon)*pi(n-1) + delta, 1 - exp(-epsilon)*(1 - pi(n-1) - delta), 1), so that the set of group keys released is (epsilon, delta)-DP for one row added or removed. A one-row group is kept with probability delta. Charged once per execution, whatever the number of groups. Group keys, and every column the node reads per group outside its aggregates, must be of a type that spells each value one way (integers, oid, dates, times, timestamps, booleans, "char", uuid, bytea, enums, text and varchar under a deterministic collation, domains over these; not numeric, floats, interval, arrays, jsonb, char(n), ranges, nondeterministic collations): PostgreSQL reads them from the group''s first row.';
