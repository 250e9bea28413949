# Fits the mixed models analysis/mixed_model.py asks for, with glmmTMB (Brooks et al. 2017).
#
#   Rscript --vanilla glmm.R DATA.csv SPEC.json OUT.json
#
# DATA.csv: one row per scored utterance and fit group (column `fit_data`); every other column is
# a number or a label, read as data. SPEC.json: the fits, written by analysis/mixed_model.py from
# its own vocabulary (formulas name only its own columns). OUT.json: per fit its fixed effects,
# covariance of the contrasts asked for, random-effect sds, convergence and timing; a fit that
# fails gives its error message instead. Nothing from DATA is ever evaluated as code.
suppressPackageStartupMessages({
  library(glmmTMB)
  library(jsonlite)
})
args <- commandArgs(trailingOnly = TRUE)
if (length(args) != 3) stop("usage: Rscript glmm.R DATA.csv SPEC.json OUT.json")
spec <- fromJSON(args[2], simplifyVector = FALSE)
data <- read.csv(args[1], stringsAsFactors = FALSE, colClasses = "character")
numeric_cols <- unlist(spec$numeric)
for (col in numeric_cols) data[[col]] <- as.numeric(data[[col]])

SINGULAR_SD <- 1e-3      # a random-effect sd (log scale) under this is estimated at 0
OVERDISPERSED <- 1.5     # Pearson chi-square over residual df above this: negative binomial

fit_terms <- function(f, d, random, family) {
  warnings <- character(0)
  formula <- as.formula(paste(c(f$fixed, unlist(random)), collapse = " + "))
  fam <- switch(family, poisson = poisson(), nbinom2 = nbinom2(), stop("unknown family ", family))
  m <- withCallingHandlers(
    tryCatch(glmmTMB(formula, data = d, family = fam), error = function(e) e),
    warning = function(w) {
      warnings <<- c(warnings, conditionMessage(w))
      invokeRestart("muffleWarning")
    })
  list(model = m, warnings = warnings, formula = paste(deparse(formula, width.cutoff = 500L), collapse = " "))
}

re_sds <- function(m) lapply(VarCorr(m)$cond, function(v) as.numeric(attr(v, "stddev")))

# Fit f's formula with all its random terms; a fit whose Hessian is not positive definite because
# a variance sits at 0 is fitted again without those terms (a term the data cannot tell from no
# variation), and the drop is recorded. A Poisson fit whose residuals are overdispersed is fitted
# again as a negative binomial (nbinom2) with the terms kept.
one_fit <- function(f) {
  d <- data[data$fit_data == f$data, , drop = FALSE]
  for (col in unlist(f$factors)) d[[col]] <- factor(d[[col]])
  started <- proc.time()[["elapsed"]]
  random <- f$random
  family <- f$family
  notes <- character(0)
  repeat {
    r <- fit_terms(f, d, random, family)
    m <- r$model
    if (inherits(m, "error") || isTRUE(m$sdr$pdHess)) break
    sds <- re_sds(m)
    zero <- setdiff(names(sds)[vapply(sds, function(s) all(s < SINGULAR_SD), TRUE)], f$keep)
    if (length(zero) == 0) break
    notes <- c(notes, paste0("dropped ", paste(unlist(random[zero]), collapse = ", "),
                             ": variance estimated at 0 and the Hessian not positive definite with it"))
    random <- random[setdiff(names(random), zero)]
  }
  dispersion <- NA
  if (!inherits(m, "error") && family == "poisson") {
    dispersion <- sum(residuals(m, type = "pearson")^2) / df.residual(m)
    if (is.finite(dispersion) && dispersion > OVERDISPERSED) {
      nb <- fit_terms(f, d, random, "nbinom2")
      if (!inherits(nb$model, "error") && isTRUE(nb$model$sdr$pdHess)) {
        notes <- c(notes, sprintf("overdispersed for a Poisson (Pearson chi2/df %.2f): negative binomial", dispersion))
        r <- nb
        m <- nb$model
        family <- "nbinom2"
      } else {
        notes <- c(notes, sprintf("overdispersed for a Poisson (Pearson chi2/df %.2f), and the negative binomial did not fit: Poisson kept", dispersion))
      }
    }
  }
  out <- list(id = f$id, rows = nrow(d), seconds = proc.time()[["elapsed"]] - started, warnings = r$warnings,
              notes = notes, formula = r$formula, family = family, pearson_dispersion = dispersion)
  if (inherits(m, "error")) {
    out$error <- conditionMessage(m)
    return(out)
  }
  beta <- fixef(m)$cond
  V <- as.matrix(vcov(m)$cond)
  out$coef <- as.list(beta)
  out$se <- as.list(sqrt(pmax(diag(V), 0)))
  # a contrast: weights over coefficient names; its estimate and standard error from vcov
  out$contrasts <- lapply(f$contrasts, function(w) {
    w <- unlist(w)
    known <- names(w) %in% names(beta)
    if (!all(known)) return(list(missing = names(w)[!known]))
    x <- setNames(rep(0, length(beta)), names(beta))
    x[names(w)] <- w
    list(estimate = sum(x * beta), se = sqrt(max(as.numeric(t(x) %*% V %*% x), 0)))
  })
  out$re_sd <- re_sds(m)
  out$pd_hessian <- isTRUE(m$sdr$pdHess)
  out$convergence <- m$fit$convergence
  out$optimizer_message <- m$fit$message
  out$loglik <- as.numeric(logLik(m))
  out
}

results <- lapply(spec$fits, one_fit)
names(results) <- vapply(spec$fits, function(f) f$id, "")
versions <- list(R = paste(R.version$major, R.version$minor, sep = "."),
                 glmmTMB = as.character(packageVersion("glmmTMB")),
                 TMB = as.character(packageVersion("TMB")))
writeLines(toJSON(list(versions = versions, fits = results), auto_unbox = TRUE, digits = NA, na = "null",
                  null = "null"), args[3])
