// clean_sharded.h: 'ft-data clean' under mpirun: ranks clean slices of the input files and
// exchange content hashes and LSH band hashes, for the single-process result.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "clean_io.h"
#include "ft/trainer/communicator.h"
#include "ft/trainer/quality.h"

namespace ft::data_cli {

// Rank r reads a contiguous slice of the input files (split by bytes) and, in three reads of
// it: (1) filters, hashes and signs its documents; content hashes go to the rank that owns
// them (hash mod R), which names every copy after the first; band hashes (with the 8-bit
// signatures) go to their owners, which list the earlier documents sharing a band as
// candidates; (2) the shingle sets the candidate pairs need are computed where the documents
// are and sent to the rank that checks the pair, which keeps the pairs at or above the
// threshold; rank 0 resolves them in input order (a document is a near duplicate of its first
// earlier kept partner); (3) every rank writes its kept documents, and rank 0 concatenates
// the parts into `out` (and --removed's parts, the originals' ids fetched from their ranks).
// Both files equal the single-process run's byte for byte. Returns the statistics
// summed over ranks (on every rank).
trainer::data::CleanStats clean_sharded(const std::vector<std::filesystem::path>& inputs,
                                        const std::string& out,
                                        const trainer::data::CleanOptions& clean,
                                        const CleanIoOptions& io, trainer::Communicator& world);

}  // namespace ft::data_cli
