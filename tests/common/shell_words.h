#pragma once
// The words a POSIX shell makes of a command line, for tests that read back the commands the tool prints (which
// quote with single quotes, core/common/shell_quote.h). Written from the shell's rules (POSIX 2.2 Quoting), not
// from the quoting code it checks: unquoted blanks separate words; '...' keeps everything up to the next single
// quote; "..." keeps everything, with \ escaping $ ` " \ and newline; outside quotes \ keeps the next character.
// No expansions: a command holding $, `, *, ? or ~ outside quotes is refused (std::runtime_error), as is an
// unterminated quote.
#include <stdexcept>
#include <string>
#include <vector>

namespace mismatch::test {

inline std::vector<std::string> shellWords(const std::string& command)
{
    std::vector<std::string> words;
    std::string word;
    bool inWord = false;
    for (std::size_t i = 0; i < command.size(); ++i) {
        const char c = command[i];
        if (c == ' ' || c == '\t' || c == '\n') {
            if (inWord) {
                words.push_back(word);
                word.clear();
                inWord = false;
            }
            continue;
        }
        inWord = true;
        if (c == '\'') {
            const std::size_t close = command.find('\'', i + 1);
            if (close == std::string::npos) throw std::runtime_error("unterminated ' in: " + command);
            word += command.substr(i + 1, close - i - 1);
            i = close;
        } else if (c == '"') {
            for (++i;; ++i) {
                if (i >= command.size()) throw std::runtime_error("unterminated \" in: " + command);
                if (command[i] == '"') break;
                if (command[i] == '\\' && i + 1 < command.size()
                    && std::string("$`\"\\\n").find(command[i + 1]) != std::string::npos) {
                    ++i;
                }
                word += command[i];
            }
        } else if (c == '\\') {
            if (i + 1 < command.size()) word += command[++i];
        } else if (std::string("$`*?~").find(c) != std::string::npos) {
            throw std::runtime_error(std::string("unquoted '") + c + "' (an expansion) in: " + command);
        } else {
            word += c;
        }
    }
    if (inWord) words.push_back(word);
    return words;
}

} // namespace mismatch::test
