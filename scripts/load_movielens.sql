-- MovieLens ml-latest-small (data/README.md, data/movielens/README.txt for its license):
-- 100,004 ratings by 671 users, many rows per person. movies and movie_genres are public
-- (the catalogue); ratings belong to users, declared as its privacy unit.
SET client_min_messages = warning;
DROP TABLE IF EXISTS ratings, movie_genres, movies;
CREATE TABLE movies (movie_id int PRIMARY KEY, title text, genres text);
CREATE TABLE ratings (user_id int, movie_id int REFERENCES movies, rating numeric(2,1),
                      rated_at bigint);
\copy movies FROM 'data/movielens/movies.csv' WITH (FORMAT csv, HEADER true)
\copy ratings FROM 'data/movielens/ratings.csv' WITH (FORMAT csv, HEADER true)
CREATE TABLE movie_genres AS
  SELECT movie_id, genre FROM movies, unnest(string_to_array(genres, '|')) AS genre;
SECURITY LABEL FOR pg_exp_mech ON COLUMN ratings.user_id IS 'privacy_unit';
ANALYZE movies, ratings, movie_genres;
