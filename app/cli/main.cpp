#include "app/cli/cli.h"
#include "core/common/runtime.h"

#include <iostream>

int main(int argc, char** argv)
{
    mismatch::preferPassiveOpenMpWaiting(argv);
    std::vector<std::string> arguments(argv, argv + argc);
    return mismatch::cli::run(arguments, std::cout, std::cerr);
}
