//! What an evaluating child does with the memory of what it no longer needs: a large
//! evaluation freed value by value costs milliseconds its answer would wait for, so a child
//! that ends once it has answered leaves it to its end, and one that serves build after build
//! frees it once the answer is given.

/// Set in an evaluating child: it ends once it has answered, and gives its memory back to the
/// system all at once then.
pub(crate) static ENDS_AFTER_ANSWER: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// Set in an evaluator serving one build after another ([`crate::serving`]): what the answer
/// would wait for the freeing of is freed once it is given ([`collect_garbage`]).
pub(crate) static SERVING: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

thread_local! {
    /// What this thread is to free once its answer is given.
    static GARBAGE: std::cell::RefCell<Vec<Box<dyn std::any::Any>>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// Drops `value` — or, in an evaluating child, leaves it to the process's end (or, in one
/// that serves several builds, to the moment its answer is given): freeing a large evaluation
/// or node value by value costs milliseconds the answer would wait for.
pub(crate) fn discard<T: 'static>(value: T) {
    if SERVING.load(std::sync::atomic::Ordering::Relaxed) {
        GARBAGE.with(|g| g.borrow_mut().push(Box::new(value)));
    } else if ENDS_AFTER_ANSWER.load(std::sync::atomic::Ordering::Relaxed) {
        std::mem::forget(value);
    }
}

/// Frees what this thread [`discard`]ed.
pub(crate) fn collect_garbage() {
    let garbage = GARBAGE.with(|g| std::mem::take(&mut *g.borrow_mut()));
    drop(garbage);
}
