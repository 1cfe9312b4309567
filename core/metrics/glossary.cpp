#include "core/metrics/glossary.h"

#include <algorithm>
#include <cctype>

namespace mismatch::metrics {

namespace {

std::vector<GlossaryEntry> buildGlossary()
{
    return {
        {"mismatch", {"mismatch_kl", "KL(mu || pi)", "full-vocabulary KL", "full KL", "mismatch KL"},
            "D(h) = sum_v mu(v|h) (log mu(v|h) - log pi(v|h)); token mean over response tokens",
            "How far the rollout engine's next-token distribution is from the trainer's, in nats per token, over "
            "the whole vocabulary at every generated position. The tool's headline measure."},
        {"BF16 unit", {"x BF16", "BF16 multiple", "bf16_unit"},
            "the mismatch of the plain BF16 engine (everything bf16, fresh weights, no noise) against the FP32 "
            "trainer, same model and prompts",
            "The floor any engine has; every mismatch is also shown as a multiple of it (\"212x BF16\")."},
        {"k1", {"k1_kl", "kl_sample_train_v1", "rollout_corr/kl"}, "mean of log mu(y) - log pi(y) over sampled tokens",
            "Sampled-token estimate of KL(mu || pi): needs only the chosen token's two log-probabilities, which is "
            "what outside trainers (verl, Tinker) log. Unbiased but noisy; can be negative on a batch."},
        {"k2", {"kl_sample_train_v2"}, "mean of (log mu(y) - log pi(y))^2 / 2 over sampled tokens",
            "Sampled-token estimate of KL(mu || pi), low variance, biased for large mismatch (Tinker logs it)."},
        {"k3", {"k3_kl", "rollout_corr/k3_kl"}, "mean of r - 1 - log r, r = pi(y) / mu(y), over sampled tokens",
            "Sampled-token estimate of KL(mu || pi) that is never negative; what verl logs as k3_kl."},
        {"r", {"rho", "importance weight", "is_weight"}, "r = pi(y) / mu(y) of the sampled token",
            "The per-token importance weight between the trainer and the engine; 1 when they agree. TIS and MIS "
            "act on it."},
        {"prob_diff", {"prob_diff_mean", "rollout_probs_diff", "|mu - pi|", "|mu-pi|"},
            "|mu(y) - pi(y)| of the sampled token",
            "A probability difference (verl logs its mean, max and std): not a KL, so it has no place on the nats "
            "scale; shown beside it."},
        {"mult_prob_error", {"token_mult_prob_error"}, "token mean of exp(|log mu(y) - log pi(y)|)",
            "NeMo-RL's multiplicative probability error: 1 when the engine and trainer agree, a ratio, not a KL."},
        {"chi2", {"chi2_token", "chi2_seq"}, "mean of r^2 - 1, r = pi(y) / mu(y)",
            "A chi-square divergence estimate (verl's rollout_corr/chi2_*): sensitive to rare tokens, not a KL."},
        {"r / rho", {"Pearson / Spearman"},
            "Pearson's r and Spearman's rho (r of the ranks) of an estimator's per-token value with the per-token "
            "full KL",
            "How closely the number a trainer logs per token follows the per-token mismatch (1: in step); absent "
            "for fewer than 3 tokens or a constant series. Not the importance weight r."},
        {"entropy", {"trainer entropy"}, "H(pi(.|h)) = -sum_v pi(v|h) log pi(v|h)",
            "How spread the next-token distribution is; mismatch tends to sit where it is high."},
        {"mu(y)", {"mu", "engine probability"}, "mu(y|h), the rollout engine's probability of the sampled token",
            "The Admission and Breakdown strips bin the summed KL by it: where (confident or unsure tokens) the "
            "mismatch sits."},
        {"KL share", {"% of summed KL", "summed KL", "kl_share"},
            "sum of KL(mu || pi) over a bin's tokens / sum over all response tokens",
            "Where the mismatch sits: the share of a configuration's summed per-token KL in each bin of mu(y) or of "
            "the trainer's entropy; the bins add up to 100%."},
        {"pi(y)", {"pi", "trainer probability"}, "pi(y|h), the FP32 trainer's probability of the sampled token",
            "The reference distribution the engine is compared with."},
        {"quality", {"Q", "q_i"}, "q_i = mean over response tokens of KL(pi_student || teacher); Q = mean of q_i",
            "How close the student is to the teacher on held-out problems (lower is better); the failure rule "
            "compares it with the BF16-engine baseline."},
        {"relative change", {"d", "quality change", "change vs BF16"}, "d = (Q_run - Q_base) / Q_base",
            "The relative quality change against the BF16-engine baseline at the same step: positive is worse."},
        {"failure line", {"threshold (relative)", "0.20"}, "d = 0.20 by default",
            "A point fails when the whole 95% interval of d lies at or above it, passes when entirely below, and is "
            "undecided when its interval contains it."},
        {"undecided", {"borderline"}, "the interval contains the line",
            "Neither pass nor fail: calibration adds seeds to such a point; an admission decision whose interval "
            "straddles the threshold is borderline. A point estimate alone never decides."},
        {"95% interval", {"[95%]", "95% bootstrap interval"},
            "percentile bootstrap over prompts (a mismatch) or paired over problems (d; with seed replicates "
            "d +- t sqrt(V_problems + V_seeds))",
            "The range that holds the figure with 95% confidence; the failure rule and the admission decision use "
            "the whole interval, never the point estimate."},
        {"noise floor", {"null comparison"}, "half-width of the interval of d of the BF16 baseline against itself "
                                               "(other seeds)",
            "How much quality moves with the seed alone; a calibration whose noise floor is a large part of the "
            "failure line is flagged."},
        {"flag", {"flags", "flagged"}, "",
            "A calibration is flagged when the BF16 baseline against itself fails the rule, its noise floor is a "
            "large part of the failure line, a run passed at a larger mismatch than one that failed, or an "
            "undecided point lies between the bracket's ends. Its budget is shown with the flags, never used "
            "silently."},
        {"budget", {"bracket", "largest passing", "smallest failing"},
            "[largest passing mismatch, smallest failing mismatch] over decided points",
            "How much mismatch the student tolerates at a training step; the admission threshold is its lower end "
            "(times 1 - margin)."},
        {"admission threshold", {"threshold"}, "lower end of the budget bracket x (1 - margin), nats/token",
            "A screened configuration is admitted when its mismatch interval lies below it, rejected when above."},
        {"decision", {"admit", "reject"},
            "admit: interval's high end < threshold; reject: its low end > threshold; else borderline",
            "An admission check's verdict on a candidate configuration at a student checkpoint."},
        {"staleness", {"k"}, "k = optimizer steps between the engine's weights and the trainer's",
            "Asynchronous rollouts use weights k steps old; counted in optimizer steps, never in checkpoints."},
        {"noise", {"sigma"}, "Gaussian weight noise with sigma relative to each tensor's RMS, seeded",
            "A dial of mismatch used to calibrate the budget."},
        {"added mismatch", {"added"}, "mismatch of the configuration with one cell quantized - BF16 unit",
            "Layer sensitivity: what quantizing one layer's module group (or its KV cache) adds over the BF16 "
            "engine; the heatmap's colour."},
        {"module group", {"module groups"}, "",
            "Layer sensitivity: what one cell quantizes, the rest staying BF16: per layer one projection (q, k, v, "
            "o, gate, up, down: its weights and input activations) or kv (that layer's KV cache); at layer -1 "
            "embed_tokens and lm_head (embed_lm_head when tied)."},
        {"per-token part", {"per-token"}, "the configuration's KL on the BF16 engine's prefixes (teacher-forced)",
            "Prefix shift: the mismatch the engine adds token by token, without changing which prefixes are "
            "reached."},
        {"prefix-shift part", {"prefix shift"}, "total mismatch - per-token part",
            "Prefix shift: what the engine's own, different prefixes add. Per-token corrections do not remove it."},
        {"first divergence", {"divergence"}, "first position where two same-seed generations choose different tokens",
            "Prefix shift: how soon the engine's generations leave the BF16 engine's path."},
        {"TIS", {"truncated importance sampling"}, "token weight min(r, C), r = pi(y) / mu(y), cap C",
            "A per-token correction of the training loss for mismatch: each token's loss is weighted by its "
            "importance weight, capped at C."},
        {"MIS", {"masked importance sampling"}, "token weight 1 when 1/C <= r <= C, else 0 (the token is dropped)",
            "A per-token correction that drops tokens whose importance weight lies outside [1/C, C] from the loss "
            "and its mean."},
        {"source", {"sources"}, "",
            "Breakdown: one way a configuration differs from the BF16 engine, switched on and off alone: weights, "
            "activations, kv_cache, embedding_lm_head (the recipe's formats), staleness, noise."},
        {"add-one-in", {"add_one_in"}, "M(BF16 + source) - M(BF16)",
            "Breakdown: a source's effect added alone to the BF16 engine."},
        {"leave-one-out", {"leave_one_out"}, "M(all) - M(all without the source)",
            "Breakdown: a source's effect removed from the whole configuration."},
        {"Shapley", {"shapley"}, "mean over every order of the sources of the source's marginal effect",
            "Breakdown: a fair split whose parts add up to M(all) - M(BF16) exactly; measured for up to a few "
            "sources (2^n measurements)."},
        {"interaction", {"remainder"}, "M(all) - M(BF16) - sum of the parts",
            "Breakdown: what the sources do together beyond their parts (negative when they overlap)."},
        {"KV capacity", {"KV tokens", "kv_capacity"}, "tokens of KV cache that fit a memory budget, scales counted",
            "What a KV-cache format buys: an FP8 cache holds close to twice the tokens of BF16 in the same memory "
            "(less its scales)."},
        {"protocol", {"measurement protocol"}, "prompt set and count, max tokens, sampling, seeds, KV-scale policy",
            "What a mismatch figure depends on besides the configuration; a budget and its screens use one."},
    };
}

std::string lower(std::string text)
{
    std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return std::tolower(c); });
    return text;
}

} // namespace

const std::vector<GlossaryEntry>& glossary()
{
    static const std::vector<GlossaryEntry> entries = buildGlossary();
    return entries;
}

const GlossaryEntry* findGlossaryEntry(const std::string& name)
{
    const std::string wanted = lower(name);
    for (const GlossaryEntry& entry : glossary()) {
        if (lower(entry.term) == wanted) {
            return &entry;
        }
        for (const std::string& alias : entry.aliases) {
            if (lower(alias) == wanted) {
                return &entry;
            }
        }
    }
    return nullptr;
}

} // namespace mismatch::metrics
