#include "core/io/export_internal.h"

#include "core/common/error.h"

#include <cmath>
#include <sstream>

// Export: verl's on-policy distillation (--to verl with a teacher). The rollout section is verlExport's
// (export_engines.cpp); this file adds the student, the teacher, the distillation loss of the objective the budget
// was calibrated with and the rollout correction. Keys and their meaning as verl-project/verl has them
// (1dda039b9c6311889a9c9a26040677e1254814f9): verl/trainer/config/distillation/distillation.yaml and
// verl/workers/config/distillation.py (distillation.*), verl/trainer/distillation/losses.py (the loss modes),
// verl/trainer/config/algorithm/rollout_correction.yaml and verl/trainer/ppo/rollout_corr_helper.py
// (algorithm.rollout_correction.*), verl/trainer/config/_generated_ppo_trainer.yaml (the merged schema).

namespace mismatch::io::exporting {

namespace {

// The run file's objective names that distill from a teacher (core/train/run_config.h).
constexpr const char* kOpdObjectives = "opd_full_kl, opd_k1, opd_k3, opd_topk";

void checkDistillation(const VerlDistillation& opd)
{
    if (opd.teacherPath.empty()) {
        throw InputError("--teacher", "", "on-policy distillation needs the teacher model's path");
    }
    const std::string& objective = opd.objective;
    if (objective == "reinforce" || objective == "grpo") {
        throw InputError("--objective", "",
            objective + " learns from a task reward, not from the teacher: verl's on-policy distillation takes "
                + kOpdObjectives);
    }
    if (objective != "opd_full_kl" && objective != "opd_k1" && objective != "opd_k3" && objective != "opd_topk") {
        throw InputError("--objective", "",
            "expected the objective the budget was calibrated with (" + std::string(kOpdObjectives) + "), got '"
                + objective + "'");
    }
    if (objective == "opd_topk" && opd.topK < 1) {
        throw InputError("--top-k", "", "opd_topk needs its k (1 or more), got " + std::to_string(opd.topK));
    }
    if (objective != "opd_topk" && opd.topK != 0) {
        throw InputError("--top-k", "", "only opd_topk takes a k (the objective is " + objective + ")");
    }
    if (opd.correction != "none" && opd.correction != "tis" && opd.correction != "mis") {
        throw InputError("--correction", "", "expected none, tis or mis, got '" + opd.correction + "'");
    }
    if (opd.correction != "none" && !(std::isfinite(opd.correctionCap) && opd.correctionCap > 1.0)) {
        throw InputError("--correction-cap", "",
            opd.correction + " needs a cap above 1, got " + Json(opd.correctionCap).dump());
    }
}

// algorithm.rollout_correction in verl's decoupled mode (bypass_mode false): verl recomputes pi_old with the trainer
// and weighs or rejects tokens by r = pi_old(y) / mu(y) (rollout_corr_helper.py, log_ratio = old_log_prob -
// rollout_log_prob), the ratio w of the run file's corrections (core/train/objectives.h).
//   tis: rollout_is token, rollout_is_threshold C: per-token weight min(r, C) (a single float is the TIS upper
//        bound; a "lower_upper" string would be IcePop, which keeps masked tokens in the mean).
//   mis: rollout_rs token_k1, rollout_rs_threshold C: tokens with -log r outside [log(1/C), log C] leave the response
//        mask, so they leave the loss and the token mean's denominator; one float is the upper ratio bound and its
//        reciprocal the lower (_parse_rollout_rs_thresholds), the run file's two-sided [1/C, C].
void addCorrectionKeys(const VerlDistillation& opd, std::vector<VerlKey>& keys)
{
    const std::string prefix = "algorithm.rollout_correction.";
    const bool tis = opd.correction == "tis";
    const bool mis = opd.correction == "mis";
    keys.push_back({prefix + "rollout_is", tis ? Json("token") : Json(nullptr)});
    if (tis) {
        keys.push_back({prefix + "rollout_is_threshold", opd.correctionCap});
    }
    keys.push_back({prefix + "rollout_rs", mis ? Json("token_k1") : Json(nullptr)});
    if (mis) {
        keys.push_back({prefix + "rollout_rs_threshold", opd.correctionCap});
    }
    keys.push_back({prefix + "bypass_mode", false});
}

// `text` as YAML (or shell) comment lines of at most 118 characters, broken between words.
std::string commentLines(const std::string& text)
{
    std::istringstream words(text);
    std::string out;
    std::string line = "#";
    for (std::string word; words >> word;) {
        if (line.size() > 1 && line.size() + 1 + word.size() > 118) {
            out += line + "\n";
            line = "#";
        }
        line += " " + word;
    }
    return out + line + "\n";
}

// verlKeys as nested YAML, keys in the order of their first appearance.
std::string keysYaml(const std::vector<VerlKey>& keys)
{
    Json tree = Json::object();
    for (const VerlKey& key : keys) {
        Json* at = &tree;
        size_t start = 0;
        for (size_t dot = key.path.find('.'); dot != std::string::npos; dot = key.path.find('.', start)) {
            at = &(*at)[key.path.substr(start, dot - start)];
            start = dot + 1;
        }
        (*at)[key.path.substr(start)] = key.value;
    }
    std::ostringstream out;
    auto write = [&out](const auto& self, const Json& node, const std::string& indent) -> void {
        for (const auto& [name, value] : node.items()) {
            if (value.is_object() && !value.empty()) {
                out << indent << name << ":\n";
                self(self, value, indent + "  ");
            } else {
                out << indent << name << ": " << yamlScalar(value) << "\n";
            }
        }
    };
    write(write, tree, "");
    return out.str();
}

} // namespace

VerlLoss verlLoss(const ExportView& view)
{
    const VerlDistillation& opd = *view.options.distillation;
    checkDistillation(opd);
    VerlLoss loss;
    // verl's loss modes: forward_kl_topk (use_topk) and the sampled-token estimators kl/k1, abs, mse/k2,
    // low_var_kl/k3 of core_algos.py kl_penalty with logprob = the student's, ref_logprob = the teacher's (losses.py
    // compute_distillation_loss_reverse_kl_estimator); with use_policy_gradient the per-token loss is the negative
    // advantage of the vanilla policy loss, whose gradient at ratio 1 is loss * grad log pi(y): the run file's
    // score-function objectives. k1 without use_policy_gradient is refused by verl (its gradient does not depend on
    // the teacher).
    if (opd.objective == "opd_k1" || opd.objective == "opd_full_kl") {
        loss.lossMode = "k1";
        loss.computes = "k1 = log pi(y) - log teacher(y) of each sampled token y as the negative reward of verl's "
                        "policy-gradient loss: gradient k1 * grad log pi(y), the run file's opd_k1";
    } else if (opd.objective == "opd_k3") {
        loss.lossMode = "k3";
        loss.computes = "k3 = r - 1 - log r, r = teacher(y) / pi(y), of each sampled token y as the negative reward "
                        "of verl's policy-gradient loss: gradient k3 * grad log pi(y), the run file's opd_k3 (verl "
                        "clamps log r to [-20, 20] and k3 to 10 nats, core_algos.py kl_penalty_forward)";
    } else {
        // opd_topk: forward_kl_topk reads the teacher's top-k log-probabilities; verl warns that its policy-gradient
        // form leaves the top-k signal unused, so it is backpropagated (DistillationLossConfig docstring).
        loss.lossMode = "forward_kl_topk";
        loss.usePolicyGradient = false;
        loss.topK = opd.topK;
        loss.computes = "sum over the teacher's top-k tokens v of teacher(v) (log teacher(v) - log pi(v)), not "
                        "renormalised, backpropagated";
    }
    if (opd.objective == "opd_full_kl") {
        view.warn("verl has no full-vocabulary reverse KL loss (its loss modes are forward_kl_topk and the "
                  "sampled-token estimators kl/k1, abs, mse/k2, low_var_kl/k3: verl/trainer/distillation/losses.py; "
                  "kl_penalty 'full' is not implemented): the budget was calibrated with opd_full_kl and the export "
                  "writes loss_mode k1 with use_policy_gradient, whose expected gradient is opd_full_kl's but "
                  "estimated from one sampled token per position (opd_k1); calibrate with opd_k1 for a budget of "
                  "exactly this loss");
    }
    if (opd.objective == "opd_topk") {
        view.warn("verl has no loss mode for opd_topk: opd_topk is the reverse KL(pi || teacher) over the student's "
                  "top-k tokens, renormalised on both sides, and verl's forward_kl_topk (written, topk "
                  + std::to_string(opd.topK)
                  + ") is the forward KL(teacher || pi) over the teacher's top-k tokens, not renormalised "
                    "(verl/trainer/distillation/fsdp/losses.py compute_forward_kl_topk): another objective, so the "
                    "budget calibrated with opd_topk does not carry over to it");
        if (opd.correction == "tis") {
            view.warn("verl applies the rollout_is weights (TIS) in its policy-gradient loss only "
                      "(verl/trainer/distillation/losses.py distillation_loss); forward_kl_topk is backpropagated "
                      "(use_policy_gradient false), so the TIS cap is not applied to it");
        }
    }
    return loss;
}

// Every key of the OPD export, in the order the files write them. Each is declared by verl's schema
// (_generated_ppo_trainer.yaml) and set plainly, except the rollout's engine arguments (+, under
// engine_kwargs.<engine>: {}) and its quantization (++).
std::vector<VerlKey> verlOpdKeys(const ExportView& view, const VerlExport& rollout, const VerlLoss& loss)
{
    const VerlDistillation& opd = *view.options.distillation;
    std::vector<VerlKey> keys;
    keys.push_back({"actor_rollout_ref.model.path", modelPath(view.options)});
    // One optimizer step per batch of rollouts, as the run file's trainer takes: one mini-batch the size of the
    // batch, one epoch (verl's defaults are 256 of 1024 prompts: four steps, the later ones off-policy and clipped).
    keys.push_back({"actor_rollout_ref.actor.ppo_mini_batch_size", "${data.train_batch_size}"});
    keys.push_back({"actor_rollout_ref.actor.ppo_epochs", 1});
    for (const VerlKey& key : verlRolloutKeys(rollout)) {
        keys.push_back(key);
    }
    // The rollout engine's log-probabilities of its tokens: what the correction and verl's rollout_corr/* mismatch
    // metrics (which `mismatch import verl` reads) are computed from.
    keys.push_back({"actor_rollout_ref.rollout.calculate_log_probs", true});
    // GRPO needs no critic (need_critic: a critic only for gae, verl's default); the task reward it would use is
    // left out of the loss (use_task_rewards false).
    keys.push_back({"algorithm.adv_estimator", "grpo"});
    addCorrectionKeys(opd, keys);
    const std::string teacher = "distillation.teacher_models.teacher_model.";
    keys.push_back({"distillation.enabled", true});
    keys.push_back({teacher + "model_path", opd.teacherPath});
    // The teacher runs on the same engine, unquantized: its own inference section has no quantization and an empty
    // engine_kwargs, so the student's recipe does not reach it.
    keys.push_back({teacher + "inference.name", rollout.rollout});
    const std::string lossPrefix = "distillation.distillation_loss.";
    keys.push_back({lossPrefix + "loss_mode", loss.lossMode});
    if (loss.topK > 0) {
        keys.push_back({lossPrefix + "topk", loss.topK});
    }
    keys.push_back({lossPrefix + "use_task_rewards", false});
    keys.push_back({lossPrefix + "use_policy_gradient", loss.usePolicyGradient});
    // No clamps: the run file's objectives clamp nothing (verl's examples set 10 and -10).
    keys.push_back({lossPrefix + "loss_max_clamp", nullptr});
    keys.push_back({lossPrefix + "log_prob_min_clamp", nullptr});
    return keys;
}

std::string exportVerlOpd(const ExportView& view)
{
    const VerlLoss loss = verlLoss(view); // the options first: a wrong objective is refused whatever the recipe
    const VerlExport rollout = verlExport(view);
    const VerlDistillation& opd = *view.options.distillation;
    const std::string correction = opd.correction == "tis"
        ? "weight min(r, C) per token"
        : opd.correction == "mis" ? "tokens with r outside [1/C, C] leave the loss and its token mean" : "none";
    std::ostringstream out;
    out << commentLines("verl on-policy distillation for precision recipe " + view.recipeName() + " ("
               + rollout.rollout + " rollout): the student samples with the recipe's engine, the teacher scores its "
                 "tokens. Merge into the trainer config, or run verl_opd.sh (the same keys as overrides, with the "
                 "data and the teacher's GPUs). Keys as verl-project/verl's schema declares them (verl/trainer/config, "
                 "verl/workers/config/distillation.py).")
        << commentLines("Objective " + opd.objective
               + (opd.topK > 0 ? " (k = " + std::to_string(opd.topK) + ")" : std::string("")) + ": loss_mode "
               + loss.lossMode + ", " + loss.computes + ".")
        << commentLines("Correction " + opd.correction
               + (opd.correction == "none" ? std::string("") : " (C = " + Json(opd.correctionCap).dump() + ")")
               + " on r = pi_old(y) / mu(y): " + correction + ".")
        << "# FP8 rollout: verl-project/verl docs/low_precision/fp8.md (128x128-block weights, vLLM and SGLang).\n";
    if (!rollout.ignoredLayers.empty()) {
        out << "# The SGLang rollout leaves these modules in BF16 when its workers start with\n"
            << "# SGLANG_FP8_IGNORED_LAYERS=" << rollout.ignoredLayers << "\n";
    }
    out << keysYaml(verlOpdKeys(view, rollout, loss));
    return out.str();
}

} // namespace mismatch::io::exporting
