-- The demo's queries, on the Adult data (scripts/load_adult.sql). Run by `make demo`
-- (and by the test suite, so that the demo keeps working).
\pset footer off
\set QUIET on

\echo
\echo '1. The most common marital status. True answer first (exact counts: not private):'
SELECT marital_status, count(*) AS people
  FROM adult GROUP BY marital_status ORDER BY people DESC LIMIT 3;

\echo 'dp_argmax(marital_status, 1, epsilon): one private answer per epsilon, and how often'
\echo 'it is the true one in 100 independent draws. The lead (4,293 people) is huge, so even'
\echo 'epsilon = 0.1 is always right:'
SELECT epsilon,
       (SELECT dp_argmax(marital_status, 1, epsilon) FROM adult) AS private_answer,
       (SELECT count(*) FILTER (WHERE answer = 'Married-civ-spouse')
          FROM (SELECT (SELECT dp_argmax(marital_status, 1, epsilon) FROM adult WHERE draw > 0) AS answer
                  FROM generate_series(1, 100) draw) d) || ' / 100' AS right
  FROM unnest(ARRAY[0.1, 1, 10]::float8[]) epsilon;

\echo
\echo '2. A close race: the most common occupation (4,140 vs 4,099 vs 4,066 people).'
\echo 'P(answer) is proportional to exp(epsilon * count): a lead of 41 people is decisive at'
\echo 'epsilon = 1, usual at 0.1, and close to a three-way coin toss at 0.01. 100 draws each:'
SELECT epsilon, answer, count(*) AS draws
  FROM unnest(ARRAY[0.01, 0.1, 1]::float8[]) epsilon,
       LATERAL (SELECT (SELECT dp_argmax(occupation, 1, epsilon) FROM adult WHERE draw > 0) AS answer
                  FROM generate_series(1, 100) draw) d
 GROUP BY epsilon, answer ORDER BY epsilon, draws DESC;

\echo
\echo '3. Candidates from a public list: the most common occupation among people earning'
\echo 'over 50K, at epsilon = 0.5. Only listed items can win, so the answer never reveals an'
\echo 'item that only the data knows (true answer: Exec-managerial, 1,968 vs 1,859):'
SELECT dp_argmax(occupation, 1, 0.5, 1,
                 ARRAY['Adm-clerical', 'Craft-repair', 'Exec-managerial', 'Farming-fishing',
                       'Handlers-cleaners', 'Machine-op-inspct', 'Other-service',
                       'Priv-house-serv', 'Prof-specialty', 'Protective-serv', 'Sales',
                       'Tech-support', 'Transport-moving', 'Armed-Forces']) AS private_answer
  FROM adult WHERE income = '>50K';

\echo
\echo '4. The top 3 occupations as one private list, epsilon = 1 for the whole list:'
SELECT dp_top_k(occupation, 1, 3, 1.0) AS private_top_3 FROM adult;

\echo 'When the items themselves are private, dp_top_k_unknown_domain lets only the true top'
\echo 'k_bar items compete, with a threshold 45 people above the next one (epsilon = 1,'
\echo 'delta = 1e-6, k = 3). Countries of birth among people earning over 50K: United-States'
\echo '7,171, Philippines 61, Germany 44, India 40, ... With k_bar = 3 only United-States clears'
\echo 'the threshold (40 + 45); with k_bar = 20 it drops to 7 + 45 (the 21st country has 7):'
SELECT k_bar, private_top_3
  FROM unnest(ARRAY[3, 20]) k_bar,
       LATERAL (SELECT dp_top_k_unknown_domain(native_country, 1, 3, 1.0, 1e-6, 1, k_bar) AS private_top_3
                  FROM adult WHERE income = '>50K') top
 ORDER BY k_bar;

\echo
\echo '5. Private quartiles of age and hours per week, epsilon = 1 for the three together'
\echo '(recursive splitting: the median first, then each half, epsilon/2 per level), next to'
\echo 'the true ones. Both columns are integers: the answers are whole numbers of [0, 100],'
\echo 'in the column''s type, like percentile_disc:'
SELECT 'age' AS "column",
       percentile_disc(ARRAY[0.25, 0.5, 0.75]) WITHIN GROUP (ORDER BY age) AS true_quartiles,
       dp_quantiles(age, ARRAY[0.25, 0.5, 0.75], 0, 100, 1.0) AS private_quartiles
  FROM adult
UNION ALL
SELECT 'hours_per_week',
       percentile_disc(ARRAY[0.25, 0.5, 0.75]) WITHIN GROUP (ORDER BY hours_per_week),
       dp_quantiles(hours_per_week, ARRAY[0.25, 0.5, 0.75], 0, 100, 1.0)
  FROM adult;

\echo 'The private median of age at smaller epsilon: as the integer it is, and as float8 on'
\echo 'the default grid of 2^20 + 1 points over [0, 100] (an answer near, not at, 37):'
SELECT epsilon,
       (SELECT dp_quantile(age, 0.5, 0, 100, epsilon) FROM adult) AS private_median,
       (SELECT dp_quantile(age::float8, 0.5, 0, 100, epsilon) FROM adult) AS as_float8
  FROM unnest(ARRAY[1, 0.1, 0.01]::float8[]) epsilon;

\echo
\echo '6. A DP-only view with a privacy budget. The DBA creates a login role, a view with a'
\echo 'DP aggregate (a security barrier, so that nothing of the analyst''s runs under it),'
\echo 'grants SELECT on the view only, and gives the role epsilon = 1.2 in all. It also'
\echo 'revokes pg_tablespace_size, which counts the temporary files DP statements spill'
\echo '(a budgeted role that may execute it is refused):'
REVOKE EXECUTE ON FUNCTION pg_tablespace_size(name), pg_tablespace_size(oid) FROM PUBLIC;
CREATE ROLE analyst LOGIN PASSWORD 'analyst-demo-password';
CREATE VIEW top_status WITH (security_barrier) AS
  SELECT dp_argmax(marital_status, 1, 0.5) AS most_common_status FROM adult;
GRANT SELECT ON top_status TO analyst;
SELECT dp_budget_set('analyst', 1.2);
\connect - analyst 127.0.0.1
\echo 'Now as analyst, over TCP with a password. Each read of the view costs 0.5:'
SELECT * FROM top_status;
SELECT dp_budget_remaining();
SELECT * FROM top_status;
\echo 'The third read would need 0.5 with 0.2 left: refused (SQLSTATE 53400), no answer.'
\echo 'EXPLAIN ANALYZE (exact row counts) and the table itself are refused too:'
\set ON_ERROR_STOP off
\set VERBOSITY verbose
SELECT * FROM top_status;
EXPLAIN ANALYZE SELECT * FROM top_status;
SELECT count(*) FROM adult;
\set VERBOSITY default
\set ON_ERROR_STOP on
\connect - postgres :socket
\echo 'Back as the DBA: the budgets (the DBA''s own queries above were recorded too, without'
\echo 'a limit) and the analyst''s part of the ledger, kept outside any transaction:'
SELECT * FROM dp_budget ORDER BY role::text;
SELECT at, role, kind, epsilon, aggregate, statement FROM dp_ledger
 WHERE role = 'analyst'::regrole ORDER BY at;

\echo
\echo '7. A grouped dashboard tile: the median hours per week of each occupation. One person'
\echo 'is in one occupation, so the whole GROUP BY costs epsilon once (parallel composition),'
\echo 'not once per group. The occupations themselves come from the data: dp_partition in'
\echo 'HAVING releases an occupation with a probability that depends on its row count, so'
\echo 'that the set of keys is (epsilon, delta)-DP too. epsilon 0.5 + 0.5 and delta 1e-6 in'
\echo 'all, whatever the number of occupations (the DBA gives the analyst a delta budget):'
CREATE VIEW hours_by_occupation WITH (security_barrier) AS
  SELECT occupation, dp_quantile(hours_per_week, 0.5, 0, 100, 0.5) AS median_hours
    FROM adult GROUP BY occupation HAVING dp_partition(0.5, 1e-6);
GRANT SELECT ON hours_by_occupation TO analyst;
SELECT dp_budget_set('analyst', 1.2 + 1.0, 1e-6);
\connect - analyst 127.0.0.1
SET pg_exp_mech.quantile_grid_size = 100;
SELECT * FROM hours_by_occupation ORDER BY occupation;
SELECT format('spent: epsilon %s of %s, delta %s of %s', epsilon_spent, epsilon_limit,
              delta_spent, delta_limit) AS budget FROM dp_budget;
\connect - postgres :socket
\echo 'Its ledger lines: one for dp_quantile over all the groups, one for dp_partition:'
SELECT role, epsilon, delta, aggregate FROM dp_ledger
 WHERE role = 'analyst'::regrole AND kind = 'charge' ORDER BY at DESC LIMIT 2;

\echo
\echo '8. People, not rows: MovieLens (data/README.md; its license: research use, cite'
\echo 'Harper and Konstan 2015). 671 users rated movies 100,004 times, 71 ratings in the'
\echo 'median: a guarantee per rating would let one active user count 2,391 times. The DBA'
\echo 'declared the person once (scripts/load_movielens.sql):'
\echo '    SECURITY LABEL FOR pg_exp_mech ON COLUMN ratings.user_id IS ''privacy_unit'';'
\echo 'and every DP aggregate over ratings now counts users. The movie the most people rated'
\echo '(true: Forrest Gump 341 users, Pulp Fiction 324, Shawshank 311), epsilon = 1, the'
\echo 'candidates from the public catalogue (a movie nobody rated scores 0):'
SELECT dp_argmax(m.title, (r.user_id IS NOT NULL)::int, 1.0) AS most_rated_movie
  FROM movies m LEFT JOIN ratings r USING (movie_id);
\echo 'By genre: a user who rated many genres counts in at most L of them (chosen at random'
\echo 'per user, each genre at epsilon/L); L = 3 here, epsilon = 1 for the whole table:'
SET pg_exp_mech.max_groups_per_unit = 3;
SELECT g.genre, dp_argmax(m.title, (r.user_id IS NOT NULL)::int, 1.0) AS most_rated
  FROM movie_genres g JOIN movies m USING (movie_id) LEFT JOIN ratings r USING (movie_id)
 WHERE g.genre IN ('Action', 'Animation', 'Comedy', 'Documentary', 'Horror', 'Sci-Fi')
 GROUP BY g.genre ORDER BY g.genre;
\echo 'True answers: Action Star Wars IV (291 users), Animation Toy Story (247), Comedy Forrest'
\echo 'Gump (341), Documentary Hoop Dreams (61), Horror Silence of the Lambs (304), Sci-Fi Star'
\echo 'Wars IV (291), each user counted once per genre. Rows of users cannot be aggregated'
\echo 'before the DP aggregate; that is refused, naming the table:'
\set ON_ERROR_STOP off
\set VERBOSITY verbose
SELECT dp_argmax(movie_id, n, 1.0)
  FROM (SELECT movie_id, count(*) AS n FROM ratings GROUP BY movie_id) per_movie;
\set VERBOSITY default
\set ON_ERROR_STOP on
RESET pg_exp_mech.max_groups_per_unit;
