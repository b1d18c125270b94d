-- 003_exact_match_dataset_labels: exact match becomes the paper's, to the character; datasets
-- get a display name (file name + content hash prefix).
-- Append-only: never edit this file once released; replace a macro or view in a later file.
--
-- The paper's numbers come from the seed library's `preprocess` (behind check_any_string):
--     text.lower(); re.sub(r'[^\w\s]', '', text); re.sub(r'\s+', ' ', text).strip()
-- Python's str.lower(), \w and \s, spelt for DuckDB. engine/metrics.py normalize_answer is the
-- Python side; tests/test_views.py compares the two over every code point and random text.
-- Views bind macros by name when queried, so query_metrics (002) picks these up unchanged.
--
-- Facts that 002 spells in SQL have their home in Python; tests/test_views.py checks that the
-- two agree: the modes and the CAS / CAB pairs (engine.types.MODES, engine.statistics.bias.COMPARISONS)
-- and the built-in short labels of label_short_a / label_short_b (engine.prompting.prompts.METADATA_TYPES).

-- ---------------------------------------------------------------- Python's lower()
-- DuckDB's lower() equals Python's on every single code point except U+0130, which DuckDB maps
-- to "i" and Python to "i" + U+0307; U+0307 is a combining mark, deleted below, so the two
-- agree after normalisation. What lower() alone cannot do is Python's one context rule: a
-- capital sigma becomes final sigma (U+03C2) when the nearest non-case-ignorable character
-- before it is cased and the nearest one after it is not (or the text ends), Unicode's
-- Final_Sigma. RE2 has no look-around, so the regex carries both contexts and puts them back;
-- matches cannot overlap wrongly, because a match ends on an uncased character or the end.
-- The classes are Unicode's derived properties as Python computes them:
--   cased, not case-ignorable: Lu, Ll, Lt, plus Other_Lowercase / Other_Uppercase outside Lm
--     and Mn (ª º, Roman numerals, circled and squared Latin letters);
--   case-ignorable: Mn, Me, Cf, Lm, Sk, plus the Word_Break MidLetter / MidNumLet /
--     Single_Quote punctuation (' . : · and their variants).
CREATE OR REPLACE MACRO python_lower(s) AS
  lower(CASE WHEN contains(s, 'Σ') THEN regexp_replace(s,
    '([\p{Lu}\p{Ll}\p{Lt}\x{AA}\x{BA}\x{2160}-\x{217F}\x{24B6}-\x{24E9}\x{1F130}-\x{1F149}\x{1F150}-\x{1F169}\x{1F170}-\x{1F189}]'
    || '[\p{Mn}\p{Me}\p{Cf}\p{Lm}\p{Sk}\x{27}.:\x{B7}\x{387}\x{55F}\x{5F4}\x{2018}\x{2019}\x{2024}\x{2027}\x{FE13}\x{FE52}\x{FE55}\x{FF07}\x{FF0E}\x{FF1A}]*)'
    || '\x{3A3}'
    || '([\p{Mn}\p{Me}\p{Cf}\p{Lm}\p{Sk}\x{27}.:\x{B7}\x{387}\x{55F}\x{5F4}\x{2018}\x{2019}\x{2024}\x{2027}\x{FE13}\x{FE52}\x{FE55}\x{FF07}\x{FF0E}\x{FF1A}]*'
    || '(?:[^\p{Lu}\p{Ll}\p{Lt}\x{AA}\x{BA}\x{2160}-\x{217F}\x{24B6}-\x{24E9}\x{1F130}-\x{1F149}\x{1F150}-\x{1F169}\x{1F170}-\x{1F189}'
    || '\p{Mn}\p{Me}\p{Cf}\p{Lm}\p{Sk}\x{27}.:\x{B7}\x{387}\x{55F}\x{5F4}\x{2018}\x{2019}\x{2024}\x{2027}\x{FE13}\x{FE52}\x{FE55}\x{FF07}\x{FF0E}\x{FF1A}]|$))',
    '\1ς\2', 'g') ELSE s END);

-- ---------------------------------------------------------------- the paper's normalisation
-- Python's \w on str is exactly the categories L*, N* and "_" (str.isalnum() plus "_"), and
-- \s is str.isspace(): \t \n \v \f \r, U+001C-U+001F, U+0085 and Z*. Checked over every code
-- point; the only differences are code points the running Python's Unicode database does not
-- assign yet (RE2 in DuckDB 2.0 knows Unicode 15.0, Python 3.11 knows 14.0): no real answer
-- text is affected, and which Python the seed ran on is not recorded anyway.
CREATE OR REPLACE MACRO normalize_answer(s) AS
  trim(regexp_replace(
         regexp_replace(python_lower(s), '[^\p{L}\p{N}_\t\n\x{0b}\f\r\x{1c}-\x{1f}\x{85}\p{Z}]', '', 'g'),
         '[\t\n\x{0b}\f\r\x{1c}-\x{1f}\x{85}\p{Z}]+', ' ', 'g'), ' ');

-- ---------------------------------------------------------------- dataset names
-- How tables name a dataset: the file (or folder) name of the path it was loaded from, and the
-- first 8 hex digits of its content hash, e.g. "sample_nq.jsonl (3f2a9c1d)". The path as typed
-- differs between machines and working directories; the hash says which content it was.
CREATE OR REPLACE MACRO dataset_name(dataset) AS regexp_extract(rtrim(dataset, '/'), '[^/]*$');

CREATE OR REPLACE MACRO dataset_label(dataset, dataset_sha) AS
  coalesce(nullif(dataset_name(dataset), '') || ' ', '') || '(' || left(dataset_sha, 8) || ')';
