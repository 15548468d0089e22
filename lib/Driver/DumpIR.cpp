//===- DumpIR.cpp - --dump-ir files and the stage table -------------------===//
//
// Part of ddpc.
//
//===----------------------------------------------------------------------===//

#include "DriverInternal.h"

#include "ddpc/Support/OutputFile.h"

#include "mlir/IR/OperationSupport.h"
#include "mlir/Interfaces/FunctionInterfaces.h"
#include "mlir/Pass/Pass.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;

namespace ddpc {
namespace driver {

bool writeFileAtomic(const std::string &path, StringRef text,
                     std::string &error) {
  if (path == "-") {
    llvm::outs() << text;
    llvm::outs().flush();
    if (llvm::outs().has_error()) {
      error =
          "cannot write to standard output: " + llvm::outs().error().message();
      llvm::outs().clear_error(); // Reported here, not as a fatal IO error.
      return false;
    }
    return true;
  }
  runtime::OutputTarget target = runtime::resolveOutput(path);
  std::string tmp = target.temporary();
  {
    std::error_code ec;
    llvm::raw_fd_ostream os(tmp, ec, llvm::sys::fs::OF_None);
    if (ec) {
      error = "cannot write '" + path + "': " + ec.message() +
              " (creating the temporary '" + tmp + "')";
      return false;
    }
    os << text;
    os.close();
    if (os.has_error()) {
      error = "cannot write '" + path + "': " + os.error().message();
      os.clear_error();
      llvm::sys::fs::remove(tmp);
      return false;
    }
  }
  return runtime::commitOutput(tmp, target, error);
}

std::string printOp(Operation *op) {
  std::string s;
  llvm::raw_string_ostream os(s);
  op->print(os);
  return s;
}

// Locations are printed in the file's table rather than inline (prettyForm
// off), so that every op's location survives the text round trip (up to
// the locations of values the custom syntax does not print, e.g. loop
// induction variables, which the parser sets to the file position).
std::string printDump(Operation *op) {
  std::string s;
  llvm::raw_string_ostream os(s);
  op->print(os, OpPrintingFlags().enableDebugInfo(/*enable=*/true,
                                                  /*prettyForm=*/false));
  return s;
}

namespace {

/// Writes the IR after every pass into DIR/NNNN_<pass-argument>.mlir, or
/// DIR/NNNN_<pass-argument>.<symbol>.mlir for a pass nested on a symbol
/// (a func.func pass runs once per function). Four digits keep the files in
/// pipeline order when listed by name. Passes over function declarations,
/// pass-manager adaptors and passes that left the module unchanged write no
/// file.
class DumpIRInstrumentation : public PassInstrumentation {
public:
  /// `counter`, `last` (the text of the last file written) and `lastFile`
  /// (its name) are shared by the pass managers of one compile.
  DumpIRInstrumentation(std::string dir, int *counter, std::string *last,
                        std::string *lastFile)
      : dir(std::move(dir)), counter(*counter), last(*last),
        lastFile(*lastFile) {}
  void runAfterPass(Pass *pass, Operation *op) override {
    if (pass->getName().contains("OpToOpPassAdaptor"))
      return;
    if (auto fn = dyn_cast<FunctionOpInterface>(op); fn && fn.isExternal())
      return;
    std::string suffix;
    if (op->getParentOp())
      if (auto sym =
              op->getAttrOfType<StringAttr>(SymbolTable::getSymbolAttrName()))
        suffix = "." + sym.str();
    // Nested passes are dumped as the whole module.
    while (op->getParentOp())
      op = op->getParentOp();
    std::string text = printDump(op);
    if (text == last)
      return;
    last = std::move(text);
    StringRef arg = pass->getArgument();
    std::string name = arg.empty() ? pass->getName().str() : arg.str();
    lastFile = llvm::formatv("{0:d4}_{1}{2}.mlir", counter++, name, suffix);
    SmallString<256> path(dir);
    llvm::sys::path::append(path, lastFile);
    std::string err;
    (void)writeFileAtomic(std::string(path), last, err);
  }

private:
  std::string dir;
  int &counter;
  std::string &last;
  std::string &lastFile;
};

} // namespace

bool IRDumper::start(ModuleOp module, std::string &error) {
  if (llvm::sys::fs::exists(dir) && !llvm::sys::fs::is_directory(dir)) {
    error = "--dump-ir '" + dir + "' is a file; --dump-ir takes a folder";
    return false;
  }
  if (auto ec = llvm::sys::fs::create_directories(dir)) {
    error = "cannot create --dump-ir folder '" + dir + "': " + ec.message();
    return false;
  }
  // Dumps of an earlier compile would mix with this one's.
  std::error_code ec;
  for (llvm::sys::fs::directory_iterator it(dir, ec), end; it != end && !ec;
       it.increment(ec)) {
    StringRef file = llvm::sys::path::filename(it->path());
    if ((file.ends_with(".mlir") && file.size() > 5 &&
         llvm::all_of(file.take_front(4), llvm::isDigit) && file[4] == '_') ||
        file == "stages.txt")
      (void)llvm::sys::fs::remove(it->path());
  }
  SmallString<256> p(dir);
  lastDumpFile = "0000_import.mlir";
  llvm::sys::path::append(p, lastDumpFile);
  lastDump = printDump(module);
  return writeFileAtomic(std::string(p), lastDump, error);
}

void IRDumper::instrument(PassManager &pm) {
  pm.addInstrumentation(std::make_unique<DumpIRInstrumentation>(
      dir, &counter, &lastDump, &lastDumpFile));
}

bool IRDumper::recordStage(StringRef stage, const std::string &input,
                           PassManager &pm, std::string &error) {
  if (stagesText.empty())
    stagesText = "# ddpc --dump-ir: each stage replays as\n"
                 "#   ddpc-opt INPUT --pass-pipeline='PIPELINE'\n"
                 "# which prints what `ddpc-opt OUTPUT` prints\n"
                 "# stage\tinput\toutput\tpipeline\n";
  std::string text;
  llvm::raw_string_ostream os(text);
  pm.printAsTextualPipeline(os);
  stagesText +=
      stage.str() + "\t" + input + "\t" + lastDumpFile + "\t" + text + "\n";
  SmallString<256> path(dir);
  llvm::sys::path::append(path, "stages.txt");
  return writeFileAtomic(std::string(path), stagesText, error);
}

} // namespace driver
} // namespace ddpc
