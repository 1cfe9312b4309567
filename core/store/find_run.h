#pragma once
// Finding a run the way a person names it: the one rule of the CLI (train --resume, status, report) and the GUI.
#include "core/store/run_store.h"

#include <string>

namespace mismatch::store {

// The run `idOrName` names: all digits is an id; anything else is a name, which must name exactly one run.
// StoreError (naming the workspace) when there is no such id, no run of that name, or several runs of that name
// (their ids listed, so that the user can give one).
RunInfo findRun(const RunStore& store, const std::string& idOrName);

}  // namespace mismatch::store
