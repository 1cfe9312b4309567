// Log import: key patterns, the families of logged keys that one row of the import table reads (import_log.h
// KnownKeyPattern). Their table, the matching of a key against a pattern, and the mappings the patterns add to a
// log: a pattern's measure from the one key that matches it, else every matching key under its own name.
#include "core/io/import_log_internal.h"

#include "core/common/utf8.h"

#include <algorithm>
#include <cassert>
#include <cstddef>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace mismatch::io {

using namespace importing;

namespace {

// One word that a vocabulary placeholder (<option>, <statistic>) stands for. In an estimator the placeholder
// becomes the word's description; `unit`, when set, is the unit of the key's value.
struct PlaceholderWord {
    std::string word;
    std::string description;
    std::string unit;
};

// verl: verl/trainer/ppo/rollout_corr_helper.py compute_rollout_rejection_mask (verl-project/verl
// 1dda039b9c6311889a9c9a26040677e1254814f9). With l = log pi(y) - log mu(y) clamped to [-20, 20] (pi: old_log_prob,
// the trainer's; mu: rollout_log_prob, the engine's), token_k1 = -l, token_k2 = l^2 / 2 and token_k3 = exp(l) - 1 -
// l; a sequence option sums, averages or takes the largest token value over the sequence's response tokens
// (SUPPORTED_ROLLOUT_RS_OPTIONS: no seq_max_k1). A k1 option's rollout_rs_threshold is "lower_upper" on the ratio,
// compared with the logs of its bounds; the others take an upper bound only.
std::vector<PlaceholderWord> buildRejectionOptions()
{
    const std::vector<std::pair<char, std::string>> tokenValues = {
        {'1', "k1 = log mu(y) - log pi(y)"},
        {'2', "k2 = (log pi(y) - log mu(y))^2 / 2"},
        {'3', "k3 = r - 1 - log r with r = pi(y) / mu(y)"},
    };
    const std::vector<std::pair<std::string, std::string>> levels = {
        {"token", "per response token, "},
        {"seq_sum", "per sequence, the sum over its response tokens of "},
        {"seq_mean", "per sequence, the mean over its response tokens of "},
        {"seq_max", "per sequence, the largest over its response tokens of "},
    };
    std::vector<PlaceholderWord> words;
    for (const auto& [level, text] : levels) {
        for (const auto& [k, value] : tokenValues) {
            if (level == "seq_max" && k == '1') {
                continue;
            }
            const std::string word = level + "_k" + k;
            words.push_back({word,
                word + " (" + text + value + ", the log ratio clamped to +-20; "
                    + (k == '1' ? "lower and upper bounds on the ratio, compared in log space)" : "an upper bound)"),
                ""});
        }
    }
    return words;
}

// verl: rollout_corr_helper.py compute_rs_metrics (the statistics of one option's value) and
// compute_rollout_rejection_mask (the fractions it masked), at the commit above. The sequence values of a token
// option are its per-sequence means; max, min and the fractions high and low are taken over response tokens for a
// token option and over sequences for a sequence option; fraction_low is 0 for the options without a lower bound.
std::vector<PlaceholderWord> buildRejectionStatistics()
{
    const std::string nats = "nats";
    const std::string fraction = "fraction";
    return {
        {"mean",
            "the mean of the value over response tokens (a sequence option's value counted at each of the "
            "sequence's tokens)",
            nats},
        {"max", "the largest value, over response tokens (token option) or sequences (sequence option)", nats},
        {"min", "the smallest value, over response tokens (token option) or sequences (sequence option)", nats},
        {"std",
            "the standard deviation over response tokens of the value clamped to the option's bounds (the lower "
            "bound, or 0, and the upper)",
            nats},
        {"fraction_high",
            "the fraction of response tokens (token option) or sequences (sequence option) whose value "
            "is above the upper bound",
            fraction},
        {"fraction_low",
            "the fraction of response tokens (token option) or sequences (sequence option) whose value is "
            "below the lower bound (0 for the options without one)",
            fraction},
        {"seq_mean",
            "the mean over sequences of each sequence's value (a token option's: its mean over the "
            "sequence)",
            nats},
        {"seq_std", "the standard deviation (n - 1) over sequences of each sequence's value", nats},
        {"seq_max", "the largest sequence value", nats},
        {"seq_min", "the smallest sequence value", nats},
        {"seq_max_deviation", "the largest |sequence value| (its distance from the ideal 0)", nats},
        {"seq_fraction_high", "the fraction of sequences whose value is above the upper bound", fraction},
        {"seq_fraction_low", "the fraction of sequences whose value is below the lower bound (k1 options)", fraction},
        {"masked_fraction", "the fraction of response tokens the option rejected", fraction},
        {"seq_masked_fraction", "the fraction of sequences with response tokens in which the option rejected a token",
            fraction},
    };
}

// The vocabulary of a placeholder, or nullptr for a placeholder that stands for text (or digits, <N>).
const std::vector<PlaceholderWord>* placeholderWords(const std::string& name)
{
    static const std::vector<PlaceholderWord> options = buildRejectionOptions();
    static const std::vector<PlaceholderWord> statistics = buildRejectionStatistics();
    if (name == "option") {
        return &options;
    }
    if (name == "statistic") {
        return &statistics;
    }
    return nullptr;
}

// One piece of a pattern's key: literal text, or a placeholder's name.
struct Piece {
    std::string text;
    bool placeholder = false;
};

std::vector<Piece> piecesOf(const std::string& key)
{
    std::vector<Piece> pieces;
    std::size_t at = 0;
    while (at < key.size()) {
        const std::size_t open = key.find('<', at);
        const std::size_t close = open == std::string::npos ? std::string::npos : key.find('>', open);
        if (close == std::string::npos) {
            pieces.push_back({key.substr(at), false});
            break;
        }
        if (open > at) {
            pieces.push_back({key.substr(at, open - at), false});
        }
        pieces.push_back({key.substr(open + 1, close - open - 1), true});
        at = close + 1;
    }
    return pieces;
}

bool isTextPlaceholder(const Piece& piece)
{
    return piece.placeholder && piece.text != "N" && !placeholderWords(piece.text);
}

// The shape the matcher relies on: at most one text placeholder, followed by literal text or by nothing, and every
// <N> followed by text that does not start with a digit (digits are taken greedily). Checked by an assert only.
[[maybe_unused]] bool wellFormed(const KnownKeyPattern& pattern)
{
    const std::vector<Piece> pieces = piecesOf(pattern.key);
    int texts = 0;
    for (std::size_t i = 0; i < pieces.size(); ++i) {
        const bool last = i + 1 == pieces.size();
        if (isTextPlaceholder(pieces[i])) {
            ++texts;
            if (!last && pieces[i + 1].placeholder) {
                return false;
            }
        }
        if (pieces[i].placeholder && pieces[i].text == "N" && !last
            && (pieces[i + 1].placeholder || (pieces[i + 1].text[0] >= '0' && pieces[i + 1].text[0] <= '9'))) {
            return false;
        }
    }
    return texts <= 1 && (pattern.measure.empty() || findImportMeasure(pattern.measure));
}

// verl: verl/trainer/ppo/ray_trainer.py RayPPOTrainer._val_metrics_update logs the validation metrics of
// verl/trainer/ppo/metric_utils.py process_validation_metrics as "val-core/<data_source>/<var_name>/<metric_name>"
// for the core variable ("acc" when the reward function returns it, else "reward") and the metrics mean@N, maj@N/*
// and best@N/* at the largest N, "val-aux/..." for the rest (the reward variable beside acc among them). mean@N is,
// per data source, the mean over problems of each problem's mean over its N responses (N =
// actor_rollout_ref.rollout.val_kwargs.n). The data source is the dataset's data_source field and may hold slashes
// (examples/data_preprocess/gsm8k.py: "openai/gsm8k"). best@N and maj@N are other statistics (the best of N
// responses, a majority vote) and are not read.
// verl: rollout_corr_helper.py compute_rollout_rejection_mask names each rejection option's statistics
// rollout_rs_<option>_<statistic> (buildRejectionOptions, buildRejectionStatistics).
// Tinker (thinking-machines-lab/tinker-cookbook 9dfcc3a2cf44432d621a01005073dc6d76a1e87a):
// distillation/train_on_policy.py incorporate_kl_penalty logs teacher_kl over the whole batch and
// teacher_kl/dataset_<i> per dataset of the run's dataset_configs (its action tokens only); rl/metric_util.py
// compute_trajectory_metrics logs env/all/... and, when the groups' logging tags (a dataset's name) split the batch,
// env/<tag>/... per tag; RLTestSetEvaluator prefixes its metrics with its name ("test" by default), so rl/train.py
// logs test/env/all/..., and distillation/train_on_policy.py, which prefixes the evaluators' metrics with "test/"
// once more, test/test/env/all/....
std::vector<KnownKeyPattern> buildKeyPatterns()
{
    using S = LogSource;
    return {
        {S::Verl, "val-core/<data source>/acc/mean@<N>", "accuracy", "accuracy/<data source>",
            "verl validation accuracy: mean over the <N> responses per problem of <data source>'s acc, then over "
            "its problems (acc as the reward function returns it)"},
        {S::Verl, "val-core/<data source>/reward/mean@<N>", "eval_reward", "eval_reward/<data source>",
            "verl validation reward: mean over the <N> responses per problem of <data source>'s reward-function "
            "score, then over its problems (the core validation variable: the reward function returns no acc)"},
        {S::Verl, "val-aux/<data source>/reward/mean@<N>", "eval_reward", "eval_reward/<data source>",
            "verl validation reward: mean over the <N> responses per problem of <data source>'s reward-function "
            "score, then over its problems (logged under val-aux: the reward function also returns acc)"},
        {S::Verl, "rollout_corr/rollout_rs_<option>_<statistic>", "", "rs_<option>_<statistic>",
            "verl rejection sampling (rollout_rs) option <option>: <statistic>"},
        {S::Tinker, "teacher_kl/dataset_<N>", "teacher_kl", "teacher_kl/dataset_<N>",
            "k1 to the teacher on dataset <N> of the run's dataset_configs: mean over that dataset's action tokens of "
            "log mu(y) - log teacher(y) with mu the sampler's log-probabilities; the OPD objective, not a mismatch"},
        {S::Tinker, "env/<tag>/correct", "train_accuracy", "train_accuracy/<tag>",
            "fraction of the training batch's episodes tagged <tag> (the environment's logging tag, its dataset's "
            "name) that the environment judged correct"},
        {S::Tinker, "env/<tag>/reward/total", "reward", "reward/<tag>",
            "mean total reward of the training batch's episodes tagged <tag>"},
        {S::Tinker, "<evaluator>/env/all/correct", "accuracy", "accuracy/<evaluator>",
            "held-out evaluation accuracy: fraction of the test set's episodes the environment judged correct "
            "(tinker-cookbook RLTestSetEvaluator, metrics prefixed <evaluator>/; sampled with the weights of the step "
            "it is logged at)"},
        {S::Tinker, "<evaluator>/env/all/reward/total", "eval_reward", "eval_reward/<evaluator>",
            "held-out evaluation reward: mean total reward of the test set's episodes (tinker-cookbook "
            "RLTestSetEvaluator, metrics prefixed <evaluator>/)"},
    };
}

// A placeholder's part of a key: key[begin, begin + length), and its word when it has a vocabulary.
struct Binding {
    std::string name;
    std::size_t begin = 0;
    std::size_t length = 0;
    const PlaceholderWord* word = nullptr;
};

// Whether key[at...] matches pieces[i...]. A text placeholder ends at an occurrence of the literal that follows it
// (tried in order) or at the key's end; its part is kept as positions, not copied, so that a long key with many
// occurrences costs time linear in its length.
bool matchFrom(const std::vector<Piece>& pieces, std::size_t i, const std::string& key, std::size_t at,
    std::vector<Binding>& bindings)
{
    if (i == pieces.size()) {
        return at == key.size();
    }
    const Piece& piece = pieces[i];
    if (!piece.placeholder) {
        return key.compare(at, piece.text.size(), piece.text) == 0
            && matchFrom(pieces, i + 1, key, at + piece.text.size(), bindings);
    }
    const auto attempt = [&](std::size_t end, const PlaceholderWord* word) {
        bindings.push_back({piece.text, at, end - at, word});
        if (matchFrom(pieces, i + 1, key, end, bindings)) {
            return true;
        }
        bindings.pop_back();
        return false;
    };
    if (piece.text == "N") {
        std::size_t end = at;
        while (end < key.size() && key[end] >= '0' && key[end] <= '9') {
            ++end;
        }
        return end > at && attempt(end, nullptr);
    }
    if (const std::vector<PlaceholderWord>* words = placeholderWords(piece.text)) {
        for (const PlaceholderWord& word : *words) {
            if (key.compare(at, word.word.size(), word.word) == 0 && attempt(at + word.word.size(), &word)) {
                return true;
            }
        }
        return false;
    }
    if (i + 1 == pieces.size()) {
        return at < key.size() && attempt(key.size(), nullptr);
    }
    const std::string& next = pieces[i + 1].text; // literal text (wellFormed)
    for (std::size_t end = key.find(next, at + 1); end != std::string::npos; end = key.find(next, end + 1)) {
        if (attempt(end, nullptr)) {
            return true;
        }
    }
    return false;
}

// `text` with each <name> that `bindings` holds replaced by the key's part (or, with `describe`, by its word's
// description). One pass: a replaced part that itself holds "<...>" (a data source may) is not replaced again.
std::string fill(const std::string& text, const std::string& key, const std::vector<Binding>& bindings, bool describe)
{
    std::string out;
    std::size_t at = 0;
    while (at < text.size()) {
        const std::size_t open = text.find('<', at);
        const std::size_t close = open == std::string::npos ? std::string::npos : text.find('>', open);
        if (close == std::string::npos) {
            out += text.substr(at);
            break;
        }
        out += text.substr(at, open - at);
        const std::string name = text.substr(open + 1, close - open - 1);
        const auto bound = std::find_if(
            bindings.begin(), bindings.end(), [&](const Binding& binding) { return binding.name == name; });
        if (bound == bindings.end()) {
            out += text.substr(open, close - open + 1);
        } else if (describe && bound->word) {
            out += bound->word->description;
        } else {
            out += key.substr(bound->begin, bound->length);
        }
        at = close + 1;
    }
    return out;
}

std::string listed(const std::vector<std::string>& items, std::size_t limit = 6)
{
    std::string text;
    for (std::size_t i = 0; i < items.size() && i < limit; ++i) {
        text += (i ? ", " : "") + items[i];
    }
    if (items.size() > limit) {
        text += ", ... (" + std::to_string(items.size()) + " in all)";
    }
    return text;
}

Mapping seriesMapping(const std::string& key, const std::string& measure, const std::string& series,
    const std::string& estimator, const std::string& unit)
{
    Mapping mapping;
    mapping.key = key;
    mapping.measure = measure.empty() ? nullptr : findImportMeasure(measure);
    mapping.extraName = series;
    mapping.series = true;
    mapping.estimator = estimator;
    mapping.unit = unit.empty() && !mapping.measure ? "as logged" : unit;
    return mapping;
}

} // namespace

namespace importing {

const std::vector<KnownKeyPattern>& allKeyPatterns()
{
    static const std::vector<KnownKeyPattern> patterns = [] {
        std::vector<KnownKeyPattern> table = buildKeyPatterns();
        for ([[maybe_unused]] const KnownKeyPattern& pattern : table) {
            assert(wellFormed(pattern)); // the table's shape, which matchFrom relies on
        }
        return table;
    }();
    return patterns;
}

std::string patternLiteral(const KnownKeyPattern& pattern)
{
    std::string longest;
    for (const Piece& piece : piecesOf(pattern.key)) {
        if (!piece.placeholder && piece.text.size() > longest.size()) {
            longest = piece.text;
        }
    }
    return longest;
}

std::vector<Mapping> patternMappings(LogSource source, const std::vector<std::string>& loggedKeys,
    const std::set<std::string>& mappedKeys, const std::set<std::string>& takenMeasures, bool nameSource,
    std::vector<std::string>& notes)
{
    struct Match {
        std::string key;
        const KnownKeyPattern* pattern = nullptr;
        KeyPatternMatch what;
    };
    // The patterns of one measure share their matches (verl's validation reward is val-core or val-aux); a pattern
    // without a measure is a group of its own.
    struct Group {
        std::string measure;
        std::vector<Match> matches;
    };
    const std::vector<KnownKeyPattern> patterns = knownKeyPatterns(source);
    std::vector<Group> groups;
    std::map<std::string, std::size_t> groupOf; // measure, or the key of a pattern without one
    std::vector<std::size_t> patternGroup;
    for (const KnownKeyPattern& pattern : patterns) {
        const std::string id = pattern.measure.empty() ? "\n" + pattern.key : pattern.measure;
        const auto [found, fresh] = groupOf.emplace(id, groups.size());
        if (fresh) {
            groups.push_back({pattern.measure, {}});
        }
        patternGroup.push_back(found->second);
    }
    for (const std::string& key : loggedKeys) {
        if (mappedKeys.count(key) || firstInvalidUtf8(key) != std::string::npos) {
            // Read already (a built-in key such as env/all/correct, or --map); or not text (a CSV header's or an
            // event file's bytes), whose parts would name a series in the run's JSON records.
            continue;
        }
        for (std::size_t p = 0; p < patterns.size(); ++p) {
            if (std::optional<KeyPatternMatch> what = matchKeyPattern(patterns[p], key)) {
                if (nameSource) {
                    what->estimator += " (" + toString(patterns[p].source) + " key)";
                }
                groups[patternGroup[p]].matches.push_back({key, &patterns[p], std::move(*what)});
                break;
            }
        }
    }
    // Extras names in use: the measures, and what --map keeps as extra:NAME.
    std::set<std::string> usedNames;
    for (const std::string& taken : takenMeasures) {
        usedNames.insert(taken.rfind("extra:", 0) == 0 ? taken.substr(6) : taken);
    }
    std::vector<Mapping> mappings;
    for (const Group& group : groups) {
        if (group.matches.empty()) {
            continue;
        }
        const bool measureFree = !group.measure.empty() && !takenMeasures.count(group.measure);
        if (measureFree && group.matches.size() == 1) {
            const Match& match = group.matches[0];
            mappings.push_back(makeMapping(match.key, group.measure, match.what.estimator, false));
            continue;
        }
        std::vector<std::string> keys;
        std::vector<std::string> series;
        std::vector<std::string> patternKeys;
        for (const Match& match : group.matches) {
            std::string name = match.what.series;
            if (findImportMeasure(name) || usedNames.count(name)) {
                name = match.key; // the series name is taken: the key names itself
            }
            usedNames.insert(name);
            mappings.push_back(seriesMapping(match.key, group.measure, name, match.what.estimator, match.what.unit));
            keys.push_back(match.key);
            series.push_back(name);
            if (std::find(patternKeys.begin(), patternKeys.end(), match.pattern->key) == patternKeys.end()) {
                patternKeys.push_back(match.pattern->key);
            }
        }
        if (measureFree) {
            std::string patternText;
            for (const std::string& key : patternKeys) {
                patternText += (patternText.empty() ? "" : " or ") + key;
            }
            notes.push_back(group.measure + " not read: " + std::to_string(keys.size()) + " logged keys match "
                + patternText + " (" + listed(keys) + "), and a measure takes one key; each is stored under its own "
                + "name (" + listed(series) + "); pick one with --map " + keys[0] + "=" + group.measure);
        }
    }
    return mappings;
}

void addPatternMappings(LogSource source, const std::set<std::string>& loggedKeys, std::vector<Mapping>& mappings,
    std::vector<std::string>& notes)
{
    std::set<std::string> mappedKeys;
    std::set<std::string> takenMeasures;
    for (const Mapping& mapping : mappings) {
        mappedKeys.insert(mapping.key);
        if (mapping.userMapped || loggedKeys.count(mapping.key)) {
            takenMeasures.insert(mapping.measureName());
        }
    }
    const std::vector<std::string> logged(loggedKeys.begin(), loggedKeys.end());
    for (Mapping& mapping : patternMappings(source, logged, mappedKeys, takenMeasures, false, notes)) {
        mappings.push_back(std::move(mapping));
    }
}

} // namespace importing

std::vector<KnownKeyPattern> knownKeyPatterns(LogSource source)
{
    std::vector<KnownKeyPattern> patterns;
    for (const auto& pattern : allKeyPatterns()) {
        // As knownKeys: an event file may be verl's; a CSV export has verl's or Tinker's keys as its header.
        if (pattern.source == source || (pattern.source == LogSource::Verl && source == LogSource::TensorBoard)
            || (source == LogSource::Csv
                && (pattern.source == LogSource::Verl || pattern.source == LogSource::Tinker))) {
            patterns.push_back(pattern);
        }
    }
    return patterns;
}

std::optional<KeyPatternMatch> matchKeyPattern(const KnownKeyPattern& pattern, const std::string& key)
{
    std::vector<Binding> bindings;
    if (!matchFrom(piecesOf(pattern.key), 0, key, 0, bindings)) {
        return std::nullopt;
    }
    KeyPatternMatch match;
    match.series = fill(pattern.series, key, bindings, false);
    match.estimator = fill(pattern.estimator, key, bindings, true);
    for (const Binding& binding : bindings) {
        if (binding.word && !binding.word->unit.empty()) {
            match.unit = binding.word->unit;
        }
    }
    return match;
}

} // namespace mismatch::io
