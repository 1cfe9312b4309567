#include "core/store/find_run.h"

#include "core/common/error.h"

#include <vector>

namespace mismatch::store {

RunInfo findRun(const RunStore& store, const std::string& idOrName)
{
    if (!idOrName.empty() && idOrName.find_first_not_of("0123456789") == std::string::npos) {
        // Up to 18 digits always fit an int64; a longer number names no stored run either.
        const auto run = idOrName.size() <= 18 ? store.run(std::stoll(idOrName)) : std::nullopt;
        if (!run) {
            throw StoreError(store.path(), "has no run with id " + idOrName + " (see `mismatch store runs`)");
        }
        return *run;
    }
    std::vector<RunInfo> named;
    for (RunInfo& run : store.listRuns()) {
        if (run.name == idOrName) {
            named.push_back(std::move(run));
        }
    }
    if (named.empty()) {
        throw StoreError(store.path(), "has no run named '" + idOrName + "' (see `mismatch store runs`)");
    }
    if (named.size() > 1) {
        std::string ids;
        for (const RunInfo& run : named) {
            ids += (ids.empty() ? "" : ", ") + std::to_string(run.id);
        }
        throw StoreError(store.path(),
            "has " + std::to_string(named.size()) + " runs named '" + idOrName + "' (ids " + ids + "): give the id");
    }
    return named.front();
}

}  // namespace mismatch::store
