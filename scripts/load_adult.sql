-- The UCI Adult data set (data/README.md): one person per row.
SET client_min_messages = warning;
DROP TABLE IF EXISTS adult;
CREATE TABLE adult (
  age int, workclass text, fnlwgt int, education text, education_num int,
  marital_status text, occupation text, relationship text, race text, sex text,
  capital_gain int, capital_loss int, hours_per_week int, native_country text,
  income text);
\copy adult FROM 'data/adult.csv' WITH (FORMAT csv, HEADER true)
ANALYZE adult;
