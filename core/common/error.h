#pragma once
// Typed errors. Bad outside input (files, arguments, databases) throws one of these with a message that
// names the file, the place in it and what was expected. Programmer errors are asserts, not exceptions.
#include <stdexcept>
#include <string>

namespace mismatch {

class Error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// Malformed or unexpected input. what() reads "FILE:LOCATION: DETAIL" (LOCATION may be empty).
class InputError : public Error {
public:
    InputError(std::string file, std::string location, std::string detail);
    const std::string& file() const { return file_; }
    const std::string& location() const { return location_; }
    const std::string& detail() const { return detail_; }

private:
    std::string file_;
    std::string location_;
    std::string detail_;
};

// A workspace database that cannot be opened, read or written as asked.
class StoreError : public Error {
public:
    StoreError(std::string path, std::string detail);
    const std::string& path() const { return path_; }
    const std::string& detail() const { return detail_; }

private:
    std::string path_;
    std::string detail_;
};

// A job stopped by its Progress object's cancel flag.
class CancelledError : public Error {
public:
    explicit CancelledError(const std::string& stage);
};

// A job that cannot run with the resources it was given (memory, device).
class ResourceError : public Error {
public:
    using Error::Error;
};

}  // namespace mismatch
