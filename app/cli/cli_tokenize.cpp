// mismatch tokenize DIR TEXT: the ids and pieces a model's tokenizer.json gives a text.
#include "app/cli/context.h"
#include "core/model/tokenizer.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <ostream>

namespace mismatch::cli {

namespace {

// DIR may be the model directory or the tokenizer.json itself.
std::string tokenizerPath(const std::string& location)
{
    const std::filesystem::path path(location);
    std::error_code error; // unreadable paths fall through to the tokenizer's own "cannot open" error
    if (std::filesystem::is_regular_file(path, error)) {
        return path.string();
    }
    return (path / "tokenizer.json").string();
}

// A token's bytes for a terminal: quoted, control characters escaped, and bytes that are not (yet) valid
// UTF-8 (a token holding part of a character) as \xNN rather than garbage.
std::string displayBytes(const std::string& bytes)
{
    std::string out = "\"";
    size_t i = 0;
    while (i < bytes.size()) {
        const auto c = static_cast<unsigned char>(bytes[i]);
        size_t length = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
        bool complete = length > 1 && i + length <= bytes.size();
        for (size_t k = 1; complete && k < length; ++k) {
            complete = (static_cast<unsigned char>(bytes[i + k]) & 0xC0) == 0x80;
        }
        if (length == 1 && c >= 0x20 && c != 0x7F && c != '"' && c != '\\') {
            out += static_cast<char>(c);
        } else if (length == 1 && (c == '"' || c == '\\')) {
            out += '\\';
            out += static_cast<char>(c);
        } else if (c == '\n') {
            out += "\\n";
        } else if (c == '\r') {
            out += "\\r";
        } else if (c == '\t') {
            out += "\\t";
        } else if (complete) {
            out.append(bytes, i, length);
            i += length;
            continue;
        } else {
            char hex[5];
            std::snprintf(hex, sizeof hex, "\\x%02X", c);
            out += hex;
        }
        ++i;
    }
    return out + "\"";
}

void registerTokenizeCommand(CLI::App& app, Context& context)
{
    struct Options {
        std::string directory;
        std::string text;
        bool addSpecialTokens = false;
    };
    auto options = std::make_shared<Options>();
    CLI::App* tokenize = app.add_subcommand("tokenize", "Print the token ids and pieces of a text");
    tokenize->add_option("DIR", options->directory, "Model directory holding tokenizer.json (or the file itself)")
        ->required();
    context.emptyValueAllowed.insert(
        tokenize->add_option("TEXT", options->text, "Text to encode (UTF-8; may be empty)")->required());
    tokenize->add_flag("--add-special-tokens", options->addSpecialTokens,
        "Apply the post-processor template (e.g. Llama 3's <|begin_of_text|>)");
    tokenize->callback([&context, options] {
        const std::string path = tokenizerPath(options->directory);
        const model::Tokenizer tokenizer = model::Tokenizer::fromFile(path);
        const std::vector<std::int64_t> ids = tokenizer.encode(options->text, options->addSpecialTokens);
        if (context.json) {
            nlohmann::json pieces = nlohmann::json::array();
            nlohmann::json special = nlohmann::json::array();
            for (const std::int64_t id : ids) {
                pieces.push_back(tokenizer.piece(id));
                special.push_back(tokenizer.isSpecial(id));
            }
            context.printJson({{"tokenizer", path}, {"ids", ids}, {"pieces", pieces}, {"special", special},
                {"count", ids.size()}, {"vocab_size", tokenizer.vocabSize()}});
            return;
        }
        std::vector<std::vector<std::string>> rows;
        for (size_t i = 0; i < ids.size(); ++i) {
            rows.push_back({std::to_string(i), std::to_string(ids[i]), tokenizer.piece(ids[i]),
                displayBytes(tokenizer.tokenBytes(ids[i])), tokenizer.isSpecial(ids[i]) ? "special" : ""});
        }
        *context.out << "tokenizer " << path << " (vocabulary " << tokenizer.vocabSize() << ")\n"
                     << formatTable({"#", "id", "piece", "bytes", ""}, rows) << ids.size()
                     << (ids.size() == 1 ? " token\n" : " tokens\n");
    });
}

const CommandRegistration registration(21, registerTokenizeCommand);
} // namespace

} // namespace mismatch::cli
