#pragma once
// Run files: a training run described in YAML (or JSON, which the YAML parser also reads). Example:
//
//   name: demo-opd
//   student: ../models/arith-student          # model directories; relative paths are resolved against the
//   teacher: ../models/arith-teacher          # run file's directory and must exist (with a config.json)
//   prompts: ../prompts/arith-train.jsonl     # training prompt set
//   objective: opd_full_kl                    # opd_full_kl | opd_k1 | opd_k3 | reinforce | grpo, or
//                                             # {name: opd_topk, top_k: 32} (top-k KL needs its k)
//   correction: {kind: tis, cap: 2.0}         # none | tis | mis; tis/mis need cap > 1 (default 2)
//   rollout:
//     recipe: ../recipes/fp8-kv.yaml          # optional; validated with loadRecipe (absent: plain BF16)
//     staleness: 1                            # engine weights are this many optimizer steps old
//     asynchronous: true                      # a rollout thread overlaps training (staleness 0: no overlap)
//     noise: {sigma: 0.0, seed: 7, modules: "model.layers.*"}   # sigma relative to each tensor's RMS
//     sampling: {temperature: 1.0, top_p: 1.0, top_k: 0, max_tokens: 16, seed: 1}
//   optimizer: {learning_rate: 1.0e-4, warmup_steps: 10, weight_decay: 0.0, gradient_clip: 1.0,
//               betas: [0.9, 0.999]}
//   batch: {prompts_per_step: 16, samples_per_prompt: 1}
//   steps: 200
//   evaluation: {every: 50, prompts: ../prompts/arith-heldout.jsonl, count: 128, max_tokens: 16,
//                bf16_unit_every: 50}
//   checkpoint: {every: 100}
//   seed: 1
//   threads: 0                                # 0: one per core
//   device: cpu                               # cpu | cuda | cuda:N: where the student, teacher, engine and
//                                             # optimizer compute (common/device.h)
//
// Required: student and prompts; teacher for the OPD objectives. Everything else has the default written in
// the structs below. REINFORCE and GRPO learn from a verifiable reward and do not use the teacher: a teacher
// given with them is accepted (so that one file can be switched between objectives) and ignored by training.
//
// Validation: every problem is an InputError naming the run file and "line L, column C" (1-based) of the
// offending key or value, with the key path in the message: malformed YAML, unknown or duplicate keys (the
// valid keys listed), wrong types, out-of-range values, unknown objective or correction names (the valid ones
// listed), paths that do not exist, a recipe that does not validate (the recipe's own located error, plus
// where the run file names it), and the cross-field rules: opd objectives need a teacher; grpo needs
// samples_per_prompt >= 2 (its advantage is relative to the other samples of a prompt); tis/mis need a cap
// > 1 and a cap with kind none is an error; periodic evaluation needs a teacher; opd_topk needs top_k
// and no other objective takes one; periodic evaluation (every > 0) needs an evaluation prompt set. A run file read
// with loadRunConfig must also name its run by the run-name rule below.
#include <cstdint>
#include <optional>
#include <string>

namespace mismatch::store {
class RunStore;
}

namespace mismatch::train {

enum class Objective { OpdFullKl, OpdK1, OpdK3, OpdTopK, Reinforce, Grpo };
std::string toString(Objective objective);
std::optional<Objective> objectiveFromString(const std::string& text);
// "opd_full_kl, opd_k1, opd_k3, opd_topk, reinforce, grpo"
std::string objectiveNames();
// The OPD objectives distill from the teacher; REINFORCE and GRPO do not read it.
bool usesTeacher(Objective objective);

enum class CorrectionKind { None, Tis, Mis };
std::string toString(CorrectionKind kind);
std::optional<CorrectionKind> correctionKindFromString(const std::string& text);

struct ObjectiveConfig {
    Objective kind = Objective::OpdFullKl;
    // opd_topk only: KL over the student's k most probable tokens, renormalised (>= 1; train/objectives.h opdTopK).
    std::int64_t topK = 0;
};

// Per-token importance-sampling correction of the mu/pi mismatch (core/train/objectives.h): TIS truncates the
// ratio pi/mu at `cap`, MIS masks the tokens whose ratio lies outside [1/cap, cap].
struct CorrectionConfig {
    CorrectionKind kind = CorrectionKind::None;
    double cap = 2.0; // used by tis/mis only; must be > 1
};

// Gaussian noise added to the engine's weights: sigma times each tensor's RMS, on the modules matching
// `modules` (a recipe match pattern).
struct NoiseConfig {
    double sigma = 0.0; // [0, limits::kMaxNoiseSigma]
    std::uint64_t seed = 0;
    std::string modules = "*";
};

struct SamplingConfig {
    double temperature = 1.0; // >= 0; 0 is greedy
    double topP = 1.0; // (0, 1]
    std::int64_t topK = 0; // >= 0; 0 is off
    std::int64_t maxTokens = 64; // >= 1, new tokens per response
    std::uint64_t seed = 0;
};

struct RolloutConfig {
    std::string recipe; // absolute path of the precision recipe; empty: everything BF16
    std::int64_t staleness = 0; // optimizer steps between the trainer's weights and the engine's
    NoiseConfig noise;
    SamplingConfig sampling;
    bool asynchronous = false;
};

struct OptimizerConfig { // AdamW with linear warmup and cosine decay (core/train/adamw.h)
    double learningRate = 1e-4; // > 0
    std::int64_t warmupSteps = 0;
    double weightDecay = 0.0; // >= 0, and weightDecay * learningRate < 1 (AdamW's decay factor stays positive)
    double gradientClip = 1.0; // global L2 norm; >= 0, 0 is off
    double beta1 = 0.9; // [0, 1)
    double beta2 = 0.999; // [0, 1)
};

struct BatchConfig {
    std::int64_t promptsPerStep = 8; // >= 1
    std::int64_t samplesPerPrompt = 1; // >= 1; grpo >= 2
};

struct EvaluationConfig {
    std::int64_t every = 0; // evaluate every this many steps; 0: no periodic evaluation
    std::string prompts; // absolute path of the held-out prompt set; needed when every > 0
    std::int64_t count = 0; // first `count` prompts of the set; 0: all
    std::int64_t maxTokens = 64; // >= 1
    std::int64_t bf16UnitEvery = 0; // measure the BF16 unit at step 1 and at every multiple of this; 0: step 1 only
};

struct CheckpointConfig {
    std::int64_t every = 0; // save a checkpoint every this many steps; 0: only the final one
};

struct RunConfig {
    std::string name; // default: the run file's stem
    std::string student; // absolute paths after parsing
    std::string teacher; // empty when not given (allowed for reinforce/grpo only)
    std::string prompts; // training prompt set
    ObjectiveConfig objective;
    CorrectionConfig correction;
    RolloutConfig rollout;
    OptimizerConfig optimizer;
    BatchConfig batch;
    std::int64_t steps = 100; // >= 1
    EvaluationConfig evaluation;
    CheckpointConfig checkpoint;
    std::uint64_t seed = 0;
    std::int64_t threads = 0; // >= 0; 0: one per core
    std::string device = "cpu"; // canonical: "cpu" or "cuda:N"; checked against this machine when a run starts

    std::string sourceFile; // where it was parsed from (not part of equality)
};

// Equality of meaning (sourceFile is ignored).
bool operator==(const RunConfig& a, const RunConfig& b);
inline bool operator!=(const RunConfig& a, const RunConfig& b)
{
    return !(a == b);
}

// Parses run-file text. `fileName` names the file in errors and gives the default name; relative paths are
// resolved against `baseDirectory`. Throws InputError (see the validation list above). The name may be any
// non-empty text here: this also reads the configuration a run stores (RunInfo::configJson), and the runs an
// analysis trains carry the names it gave them (see runNameProblem).
RunConfig parseRunConfig(const std::string& text, const std::string& fileName, const std::string& baseDirectory);
// Reads and parses a run file; paths are resolved against its directory. Its run's name (`name`, else the file's
// stem) must be a run name (runNameProblem): InputError at the `name` value (at the top of the file for the stem).
RunConfig loadRunConfig(const std::string& path);
// The configuration as JSON with every setting written out (absolute paths): what a run stores as its
// config_json. parseRunConfig of this text gives back an equal RunConfig.
std::string runConfigToJson(const RunConfig& config);

// Run names: one rule for `mismatch train`, job files (`mismatch run`) and the GUI's training form.
//
// A run file names its run with letters, digits, '.', '_' and '-', starting with a letter or digit: the name also
// names files (the GUI writes a changed form as WORKSPACE/runs/NAME.json). Why `name` is not such a name, as a
// sentence naming it ("" when it is one). The runs an analysis trains are named BASE/PART (a calibration's sweep
// runs, time-to-quality's and compare-objectives' runs), which no run file can name.
std::string runNameProblem(const std::string& name);
// A run file's name is unique among the workspace's training runs (kind "train"): a run is found by its name
// (`mismatch train --resume NAME`, `mismatch runs show NAME`), and the GUI lists runs by name. Why a new training run
// may not be named `name` in `store`, as a sentence naming the training run that has the name, its status and what
// to do instead (continue that run, or name this one otherwise); "" when it may. A name that is not a run file's (an
// analysis's BASE/PART runs, which a repeated analysis trains again under the same names) is not checked here.
// runTraining refuses such a name with InputError(the run file, "name", this sentence) before it loads anything;
// the GUI's training form shows the same sentence after "Run name: ". Resuming a run is not a new name.
std::string runNameTaken(const store::RunStore& store, const std::string& name);

} // namespace mismatch::train
